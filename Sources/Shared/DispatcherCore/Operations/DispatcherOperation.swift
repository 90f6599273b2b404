import DispatcherProtocol
import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Renders

/// The server side of one op. Adding an op is one `DispatcherRequest` (its name, arguments and
/// result, shared with the clients) and one operation registered in `OperationRegistry`.
public protocol DispatcherOperation: Sendable {
    associatedtype Request: DispatcherRequest
    /// Who may use it (`docs/protocol.md`, "Access tokens and roles").
    var access: OperationAccess { get }
    /// Throws `DispatcherError` for the answers it means; anything else is mapped by `DispatcherError.init(mapping:)`.
    func run(_ request: Request) async throws -> Request.Result
}

/// An op that can also start from the connection's reading task and answer through a callback:
/// no task of its own per request while its work waits elsewhere (the single enqueue on the
/// group commit, the most frequent request; `docs/benchmarks.md`, "Single enqueues"). Its
/// synchronous part runs before the connection reads its next frame, so it must not block.
public protocol AnsweringOperation: DispatcherOperation {
    /// Whether `start` can serve (else every request goes through `run`).
    var answersWithoutTask: Bool { get }
    /// Starts the request; `answer` is called once, from whichever task or thread ends it.
    func start(_ request: Request, answer: @escaping @Sendable (Result<Request.Result, any Error>) -> Void)
}

/// How an op started without a task of its own gives its result.
typealias OperationAnswer = @Sendable (Result<any Encodable & Sendable, any Error>) -> Void

/// Who may use an op.
public enum OperationAccess: Sendable {
    /// Anyone, before `auth` too (`ping`).
    case beforeAuthentication
    /// An authenticated connection whose token has one of these roles.
    case roles(Set<AccessRole>)

    /// What a backend does: enqueue, the image and render ops, cancel.
    public static let submitters = roles([.submit, .operate])
    /// Looking at one job or render a backend knows of: every role.
    public static let everyRole = roles([.submit, .read, .operate])
    /// Looking at the fleet: stats, lists, the audit trail.
    public static let readers = roles([.read, .operate])
    /// Changing what the queue does: job control.
    public static let operators = roles([.operate])
}

/// The ops a server answers, by name.
public struct OperationRegistry: Sendable {
    /// One op with its arguments' decoding erased, so the router can hold them all.
    struct Entry: Sendable {
        let access: OperationAccess
        let run: @Sendable (_ arguments: JSONValue) async throws -> any Encodable & Sendable
        /// The op's `AnsweringOperation.start`, when it has one that serves.
        let start: (@Sendable (_ arguments: JSONValue, _ answer: @escaping OperationAnswer) -> Void)?
    }

    private let entries: [String: Entry]

    public init(_ operations: [any DispatcherOperation]) {
        var entries: [String: Entry] = [:]
        for operation in operations {
            let (name, entry) = Self.entry(operation)
            precondition(entries[name] == nil, "two operations named \(name)")
            entries[name] = entry
        }
        self.entries = entries
    }

    public var names: [String] { entries.keys.sorted() }

    func entry(named name: String) -> Entry? { entries[name] }

    private static func entry<Operation: DispatcherOperation>(_ operation: Operation) -> (String, Entry) {
        var start: (@Sendable (JSONValue, @escaping OperationAnswer) -> Void)?
        if let answering = operation as? any AnsweringOperation, answering.answersWithoutTask { start = starting(answering) }
        return (Operation.Request.op, Entry(access: operation.access, run: { arguments in
            try await operation.run(try ArgumentDecoder.decode(Operation.Request.self, from: arguments))
        }, start: start))
    }

    private static func starting<Operation: AnsweringOperation>(_ operation: Operation) -> @Sendable (JSONValue, @escaping OperationAnswer) -> Void {
        { arguments, answer in
            let request: Operation.Request
            do {
                request = try ArgumentDecoder.decode(Operation.Request.self, from: arguments)
            } catch {
                return answer(.failure(error))
            }
            operation.start(request) { result in answer(result.map { $0 }) }
        }
    }
}

/// Turns a request's `args` into its typed request, refusing fields it does not know: a
/// misspelt option (`idempotency_key`) must not be silently ignored. Straight from the parsed
/// arguments (`JSONValueDecoder`), linear in them: a field is understood when the request's
/// decoding asked for it.
enum ArgumentDecoder {
    static func decode<Request: DispatcherRequest>(_ type: Request.Type, from arguments: JSONValue) throws -> Request {
        if let plain = Request.self as? any PlainArguments.Type, let request = plain.init(plainArguments: arguments) as? Request {
            return request
        }
        let decoded: (value: Request, unreadFields: [String])
        do {
            decoded = try JSONValueDecoder(parseDate: WireFormat.parseDate).decode(Request.self, from: arguments, root: "args")
        } catch let error as DecodingError {
            throw DispatcherError(.badArgument, describe(error))
        }
        if let unknown = decoded.unreadFields.first {
            throw DispatcherError(.badArgument, "unknown field \(unknown)")
        }
        return decoded.value
    }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, _ last: (any CodingKey)? = nil) -> String {
            JSONValueDecoder.describe(context.codingPath + [last].compactMap { $0 }, root: "args")
        }
        switch error {
        case .keyNotFound(let key, let context): return "missing field \(path(context, key))"
        case .typeMismatch(let type, let context): return "\(path(context)): expected \(expectedName(type))"
        case .valueNotFound(let type, let context): return "\(path(context)): expected \(expectedName(type)), got null"
        case .dataCorrupted(let context):
            guard let unknown = context.underlyingError as? UnknownWireCase else { return "\(path(context)): not a valid value" }
            return "\(path(context)): '\(unknown.value.prefix(64))' is not one of \(unknown.known.joined(separator: ", "))"
        @unknown default: return "\(error)"
        }
    }

    private static func expectedName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int.Type, is Int64.Type: "an integer"
        case is Double.Type: "a number"
        case is Bool.Type: "a boolean"
        case is [String: Any].Type: "an object"
        case is [Any].Type: "an array"
        default: "\(type)"
        }
    }
}

extension DispatcherError {
    /// The protocol's account of any error an operation throws.
    init(mapping error: any Error) {
        switch error {
        case let error as DispatcherError: self = error
        case RenderRequestError.busy(let seconds):
            self.init(.renderBusy, RenderRequestError.busy(retryAfterSeconds: seconds).message, retryAfterSeconds: seconds)
        case RenderRequestError.paused(let kinds, let seconds):
            self.init(.renderBusy, RenderRequestError.paused(kinds: kinds, retryAfterSeconds: seconds).message, retryAfterSeconds: seconds)
        case let error as RenderRequestError:
            self.init(Self.code(of: error), error.message)
        case let error as RenderRetryError:
            self.init(Self.code(of: error), error.message)
        case is RenderAdmission.Stopped:
            self.init(.unavailable, "the dispatcher is shutting down; retry later")
        case QueueError.unknownKind(let kind):
            self.init(.unknownKind, "\(QueueError.unknownKind(kind)); known kinds: \(FleetKinds.all.list)")
        case let error as QueueError:
            self.init(.badArgument, "\(error)")
        case let error as StorageError:
            self.init(.badArgument, "\(error)")
        case is ImageURLsUnavailable:
            self.init(.storageNotPresignable, ImageURLsUnavailable.message)
        case let error as PostgresError where error.isTransient:
            self.init(.unavailable, "the database is unavailable; retry later")
        case PostgresError.server(let state, let message, _) where state.isDataException:
            // Data exceptions: a value the database cannot store (out of range, NUL in text…).
            self.init(.badArgument, message)
        default:
            self.init(.internal, "internal error")
        }
    }

    /// The protocol's code for each refusal of a render request.
    private static func code(of error: RenderRequestError) -> DispatcherErrorCode {
        switch error {
        case .invalidCategory: .invalidCategory
        case .insufficientCredits: .insufficientCredits
        case .subscriptionExpired: .subscriptionExpired
        case .invalidToken: .invalidToken
        case .tokenAlreadyUsed, .tokenTechnicalFailuresExhausted: .tokenAlreadyUsed
        case .renderIdConflict: .renderIdConflict
        case .busy, .paused: .renderBusy
        }
    }
}
