import DispatcherProtocol
import FleetSupport
import Foundation
import Logging
import NIOCore

/// What one connection knows about its client.
struct Session: Sendable {
    var isAuthenticated: Bool
}

/// What to do with one frame.
enum Routing: Sendable {
    /// Answer at once.
    case reply(ServerResponse)
    /// Answer, then close the connection.
    case replyAndClose(ServerResponse)
    /// Run an operation (concurrently with the connection's other requests).
    case run(id: RequestID, op: String, call: @Sendable () async throws -> any Encodable & Sendable)
}

/// Reads a frame's envelope and decides: a protocol error, `auth` (which changes the session, so
/// it is handled in order with the frames around it), or an operation to run.
struct RequestRouter: Sendable {
    let registry: OperationRegistry
    let verifier: TokenVerifier

    func route(_ frame: ByteBuffer, session: inout Session) -> Routing {
        let envelope: JSONValue
        do {
            envelope = try JSONValue(parsing: frame.readableBytesView, maxDepth: WireFormat.maxDepth)
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
        if op == AuthRequest.op { return authenticate(id, arguments, &session) }
        guard let entry = registry.entry(named: op) else {
            return .reply(.failure(id, .unknownOp, "unknown op '\(op.prefix(100))'; ops: \((registry.names + [AuthRequest.op]).sorted().joined(separator: ", "))"))
        }
        guard session.isAuthenticated || !entry.requiresAuthentication else {
            return .reply(.failure(id, .unauthenticated, "send auth with the token first"))
        }
        return .run(id: id, op: op) { try await entry.run(arguments) }
    }

    private func authenticate(_ id: RequestID, _ arguments: JSONValue, _ session: inout Session) -> Routing {
        let request: AuthRequest
        do {
            request = try ArgumentDecoder.decode(AuthRequest.self, from: arguments)
        } catch {
            return .reply(ServerResponse(id: id, outcome: .failure(DispatcherError(mapping: error))))
        }
        guard verifier.verify(request.token) else {
            // Closing makes guessing cost a connection per try.
            return .replyAndClose(.failure(id, .unauthenticated, "wrong token"))
        }
        session.isAuthenticated = true
        return .reply(ServerResponse(id: id, outcome: .success(AuthRequest.Result())))
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
