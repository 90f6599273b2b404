@testable import DispatcherCore
@testable import DispatcherProtocol
import FleetSupport
import Foundation
import NIOCore
import Testing

/// The single enqueue's own paths (`docs/benchmarks.md`, "Single enqueues"): its answer and its
/// payload written by hand and its plain arguments read without the decoder must give what the
/// generic paths give.
@Suite struct EnqueueFastPathTests {
    static let ids: [RequestID?] = [.number(7), .number(-3), .number(9_007_199_254_740_991), .string("req-1"), .string(""), nil]
    static let results = [
        EnqueuedJobResult(jobId: 42, kind: "drill.noop", isNew: true),
        EnqueuedJobResult(jobId: Int64.max, kind: "image.normalize", isNew: false),
    ]

    @Test func theEnqueueAnswerWrittenByHandIsTheEncodersFrameByteForByte() throws {
        let encoder = WireFormat.makeEncoder()
        for id in Self.ids {
            for result in Self.results {
                let response = ServerResponse(id: id, outcome: .success(result))
                let byHand = try #require(response.handEncodedFrame)
                #expect(String(buffer: byHand) == String(buffer: try WireFormat.frame(response, encoder: encoder)))
            }
        }
    }

    @Test func textThatNeedsEscapingIsTheSameJSONValue() throws {
        let encoder = WireFormat.makeEncoder()
        let hostile = "q\"b\\s/n\nr\rt\tc\u{1}\u{1f}é☃"
        for id in [RequestID.string(hostile), .number(1)] {
            let response = ServerResponse(id: id, outcome: .success(EnqueuedJobResult(jobId: 5, kind: hostile, isNew: true)))
            let byHand = try #require(response.handEncodedFrame)
            #expect(byHand.readableBytesView.last == UInt8(ascii: "\n"))
            #expect(try JSONValue(json: String(buffer: byHand)) == JSONValue(json: String(buffer: try WireFormat.frame(response, encoder: encoder))))
        }
    }

    @Test func otherAnswersAreLeftToTheEncoder() {
        #expect(ServerResponse.failure(.number(1), .badArgument, "no").handEncodedFrame == nil)
        #expect(ServerResponse(id: .number(1), outcome: .success(PingRequest.Result(serverTime: Date()))).handEncodedFrame == nil)
    }

    /// jsonb keeps a number as written: the hand-written payload's must be the encoder's, byte for byte.
    @Test func thePayloadWrittenByHandHasTheEncodersNumbers() throws {
        let numbers: [Double] = [
            0, -0.0, 1, -1, 42, 1e15, 1e16, 9_007_199_254_740_992, 1e21, 0.1, 1.5, -2.25, 1e-7, 123_456_789.125, 5e-324,
            1.7976931348623157e308,
        ]
        for number in numbers {
            let payload: [String: JSONValue] = ["n": .number(number)]
            #expect(try JobSubmitter.payloadText(payload) == String(decoding: try JSONEncoder().encode(payload), as: UTF8.self))
        }
    }

    @Test func thePayloadWrittenByHandIsTheEncodersJSONValue() throws {
        let payload: [String: JSONValue] = [
            "s": .string("q\"b\\s/n\nr\rt\tc\u{1}\u{1f}é☃"), "o": .object([:]), "e": .array([]),
            "a": .array([.null, .bool(true), .bool(false), .number(2.5), .object(["k": .array([.string("")])])]),
        ]
        let byHand = try JobSubmitter.payloadText(payload)
        #expect(try JSONValue(json: byHand) == JSONValue(json: String(decoding: try JSONEncoder().encode(payload), as: UTF8.self)))
        #expect(try JobSubmitter.payloadText([String: JSONValue]()) == "{}")
    }

    @Test func aNumberTheEncoderRefusesIsRefused() {
        #expect(throws: EncodingError.self) { try JobSubmitter.payloadText(["n": JSONValue.number(.infinity)]) }
    }

    @Test func plainArgumentsAreWhatTheDecoderMakes() throws {
        let plain = [
            #"{"kind":"drill.noop"}"#, #"{"kind":"drill.noop","payload":{}}"#,
            #"{"payload":{"n":1,"s":"x","a":[1,null,{"b":true}]},"kind":"image.normalize"}"#,
        ]
        for text in plain {
            let arguments = try JSONValue(json: text)
            let fast = try #require(EnqueueRequest(plainArguments: arguments), "\(text) is plain")
            let decoded = try JSONValueDecoder(parseDate: WireFormat.parseDate).decode(EnqueueRequest.self, from: arguments, root: "args")
            #expect(decoded.unreadFields.isEmpty)
            #expect(fast.kind == decoded.value.kind)
            #expect((fast.payload ?? [:]) == (decoded.value.payload ?? [:]))
            #expect(fast.options == nil && decoded.value.options == nil)
            #expect(try ArgumentDecoder.decode(EnqueueRequest.self, from: arguments).kind == decoded.value.kind)
        }
    }

    /// Anything else goes through the decoder, so its refusals and their messages are the decoder's.
    @Test func otherArgumentsGoThroughTheDecoder() throws {
        let refused: [(text: String, messagePrefix: String)] = [
            (#"{"kind":"drill.noop","payload":{},"extra":1}"#, "unknown field args.extra"),
            (#"{"kind":"drill.noop","idempotency_key":"k"}"#, "unknown field args.idempotency_key"),
            (#"{"kind":3}"#, "args.kind: expected a string"),
            (#"{"kind":"drill.noop","payload":[]}"#, "args.payload: expected "),
            (#"{"payload":{}}"#, "missing field args.kind"),
        ]
        for item in refused {
            let arguments = try JSONValue(json: item.text)
            #expect(EnqueueRequest(plainArguments: arguments) == nil)
            let error = #expect(throws: DispatcherError.self) { try ArgumentDecoder.decode(EnqueueRequest.self, from: arguments) }
            #expect(error?.code == .badArgument && error?.message.hasPrefix(item.messagePrefix) == true, "\(item.text): \(String(describing: error))")
        }
        for text in [#"{"kind":"drill.noop","payload":null}"#, #"{"kind":"drill.noop","options":{"priority":1}}"#] {
            let arguments = try JSONValue(json: text)
            #expect(EnqueueRequest(plainArguments: arguments) == nil)
            #expect(try ArgumentDecoder.decode(EnqueueRequest.self, from: arguments).kind == "drill.noop")
        }
    }
}
