import DispatcherProtocol
import Foundation

/// `ping`: a liveness check, open before `auth`.
public struct PingOperation: DispatcherOperation {
    public init() {}
    public var access: OperationAccess { .beforeAuthentication }

    public func run(_ request: PingRequest) async throws -> PingRequest.Result {
        PingRequest.Result(serverTime: Date())
    }
}
