@testable import DispatcherCore
@testable import DispatcherProtocol
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Renders
import Testing

/// The protocol's result types send every optional field, as `null` when absent.
@Suite struct ExplicitNullTests {
    let encoder = WireFormat.makeEncoder()
    let decoder = WireFormat.makeDecoder()

    func object(_ value: some Encodable) throws -> [String: JSONValue] {
        guard case .object(let fields) = try JSONValue(json: String(decoding: try encoder.encode(value), as: UTF8.self)) else {
            throw TestFailure("not a JSON object")
        }
        return fields
    }

    @Test func absentOptionalsGoOutAsNullAndComeBackAsNil() throws {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let pending = RenderView(RenderRecord(
            id: "r1", userID: nil, ephemeralTokenID: "eph-1", ownerID: "eph-1", garmentID: "g1", bodyPhotoID: "b1",
            category: .tops, provider: "local", status: .pending, jobID: nil, providerJobID: nil, resultPath: nil, errorCode: nil,
            charged: false, deadlineAt: now, feedback: nil, createdAt: now, updatedAt: now))
        let fields = try object(pending)
        for key in ["userId", "jobId", "resultPath", "resultUrl", "errorCode", "failureCode", "errorMessage", "garmentCutout", "feedback"] {
            #expect(fields[key] == .null, "\(key) missing or not null: \(fields)")
        }
        #expect(fields["id"] == .string("r1"))
        #expect(try decoder.decode(RenderView.self, from: try encoder.encode(pending)) == pending)

        let requested = CancelRequest.Result(outcome: .cancelled, state: .cancelled, workerId: nil)
        #expect(try object(requested)["workerId"] == .null)
        let running = CancelRequest.Result(outcome: .requested, state: .running, workerId: "w1")
        #expect(try object(running)["workerId"] == .string("w1"))
        #expect(try decoder.decode(CancelRequest.Result.self, from: try encoder.encode(running)) == running)
    }

    @Test func aFieldLeftOutDecodesAsNil() throws {
        let result = try decoder.decode(LinkAccountRequest.Result.self, from: Data(#"{"userId":"u1","creditsGranted":2}"#.utf8))
        #expect(result == LinkAccountRequest.Result(userId: "u1", renderId: nil, creditsGranted: 2))
        #expect(try object(result)["renderId"] == .null)
    }
}
