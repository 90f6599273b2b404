import FleetAccess
import DispatcherProtocol
import FleetSupport
import Foundation
import Logging
import NIOCore

/// What one connection knows about its client.
struct Session: Sendable {
    /// Who it is, once authenticated (from the start on the Unix socket).
    var caller: Caller?
    /// The digest of the token it authenticated with, checked again on each request so that a
    /// revoked token stops working on open connections too; nil on the Unix socket.
    var tokenDigest: [UInt8]?

    var isAuthenticated: Bool { caller != nil }

    static func start(on transport: Transport) -> Session {
        Session(caller: transport == .unix ? .unixSocket : nil, tokenDigest: nil)
    }
}

/// What to do with one frame.
enum Routing: Sendable {
    /// Answer at once.
    case reply(ServerResponse)
    /// Answer, then close the connection.
    case replyAndClose(ServerResponse)
    /// Run an operation (concurrently with the connection's other requests).
    case run(id: RequestID, op: String, call: @Sendable () async throws -> any Encodable & Sendable)
    /// Start an operation that answers through the callback, without a task of its own
    /// (`AnsweringOperation`).
    case start(id: RequestID, op: String, start: @Sendable (_ answer: @escaping OperationAnswer) -> Void)
}

/// Reads a frame's envelope and decides: a protocol error, `auth` (which changes the session, so
/// it is handled in order with the frames around it), or an operation to run.
struct RequestRouter: Sendable {
    let registry: OperationRegistry
    let tokens: AccessTokens
    /// Read once: without a tracer, requests run without their span (a no-op span still costs
    /// a task-local context, its name and attributes on every request).
    private let traced = TracePropagation.isTracing

    init(registry: OperationRegistry, tokens: AccessTokens) {
        self.registry = registry
        self.tokens = tokens
    }

    func route(_ frame: ByteBuffer, session: inout Session) -> Routing {
        let envelope: JSONValue
        do {
            envelope = try JSONValue(parsing: Array(frame.readableBytesView), maxDepth: WireFormat.maxDepth)
        } catch {
            return .reply(.failure(nil, .malformedFrame, "a frame is one JSON object followed by a newline (\(error))"))
        }
        guard case .object(let fields) = envelope else {
            return .reply(.failure(nil, .malformedFrame, "a frame is one JSON object followed by a newline"))
        }
        guard let id = fields["id"].flatMap(Self.requestID) else {
            return .reply(.failure(nil, .malformedFrame, "id must be a string or an integer"))
        }
        guard case .string(let op)? = fields["op"] else {
            return .reply(.failure(id, .malformedFrame, "op must be a string"))
        }
        let arguments = fields["args"] ?? .object([:])
        guard case .object = arguments else { return .reply(.failure(id, .badArgument, "args must be an object")) }
        let traceParent: TraceParent?
        switch fields["traceparent"] {
        case nil, .null?: traceParent = nil
        case .string(let text)?:
            do throws(TraceParent.FormatError) {
                traceParent = try TraceParent(text)
            } catch {
                return .reply(.failure(id, .badArgument, error.description))
            }
        default: return .reply(.failure(id, .badArgument, "traceparent must be a string (a W3C traceparent) or null"))
        }
        if op == AuthRequest.op { return authenticate(id, arguments, &session) }
        guard let entry = registry.entry(named: op) else {
            return .reply(.failure(id, .unknownOp, "unknown op '\(op.prefix(100))'; ops: \((registry.names + [AuthRequest.op]).sorted().joined(separator: ", "))"))
        }
        let call: @Sendable () async throws -> any Encodable & Sendable
        if traced {
            call = { try await RequestSpan.run(op, continuing: traceParent) { try await entry.run(arguments) } }
        } else {
            call = { try await entry.run(arguments) }
        }
        // Traced requests keep their task: the span is the task's.
        let start = traced ? nil : entry.start
        guard case .roles(let roles) = entry.access else {
            if let start { return .start(id: id, op: op) { start(arguments, $0) } }
            return .run(id: id, op: op, call: call)
        }
        if let digest = session.tokenDigest, tokens.caller(for: digest) == nil {
            return .replyAndClose(.failure(id, .unauthenticated, "the access token was revoked"))
        }
        guard let caller = session.caller else {
            return .reply(.failure(id, .unauthenticated, "send auth with the token first"))
        }
        guard roles.contains(caller.role) else {
            let allowed = AccessRole.allCases.filter(roles.contains).map(\.rawValue).joined(separator: ", ")
            return .reply(.failure(id, .forbidden, "\(op) needs a token with the role \(allowed); '\(caller.name)' is \(caller.role.rawValue)"))
        }
        if let start {
            return .start(id: id, op: op) { answer in Caller.$current.withValue(caller) { start(arguments, answer) } }
        }
        return .run(id: id, op: op) { try await Caller.$current.withValue(caller) { try await call() } }
    }

    private func authenticate(_ id: RequestID, _ arguments: JSONValue, _ session: inout Session) -> Routing {
        let request: AuthRequest
        do {
            request = try ArgumentDecoder.decode(AuthRequest.self, from: arguments)
        } catch {
            return .reply(ServerResponse(id: id, outcome: .failure(DispatcherError(mapping: error))))
        }
        guard let (caller, digest) = tokens.authenticate(request.token) else {
            // Closing makes guessing cost a connection per try.
            return .replyAndClose(.failure(id, .unauthenticated, "wrong token"))
        }
        session.caller = caller
        session.tokenDigest = digest
        return .reply(ServerResponse(id: id, outcome: .success(AuthRequest.Result(name: caller.name, role: caller.role))))
    }

    /// Integers and strings only: floats and objects would not echo back exactly.
    private static func requestID(_ value: JSONValue) -> RequestID? {
        switch value {
        case .string(let text): .string(text)
        case .number(let number) where number.rounded() == number && abs(number) <= WireFormat.maxIntegerID: .number(Int64(number))
        default: nil
        }
    }
}
