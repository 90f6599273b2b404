import DispatcherProtocol
import FleetQueue
import Renders

/// `render.retry`: an operator's retry of failed renders (`RenderRetries`), one by id or many by
/// filter, each render in its own transaction; in the audit trail under the caller's name.
public struct RetryRendersOperation: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let retries: RenderRetries
    let store: RenderStore
    /// Where the action is recorded.
    let control: JobControl

    public func run(_ request: RetryRendersRequest) async throws -> RetryRendersRequest.Result {
        let dryRun = request.dryRun ?? false
        if let renderId = request.renderId {
            guard request.errorCode == nil, request.failureCode == nil, request.provider == nil, request.since == nil, request.limit == nil else {
                throw DispatcherError(.badArgument, "args.renderId names one render: leave out errorCode, failureCode, provider, since and limit")
            }
            if dryRun {
                guard let render = try await store.render(id: try storageID(renderId, field: "renderId")) else { throw DispatcherError(mapping: RenderRetryError.notFound(renderId)) }
                guard render.status == .failed else { throw DispatcherError(mapping: RenderRetryError.notFailed(renderId, render.status)) }
            } else {
                _ = try await retries.retry(id: renderId)
                try await control.record(actor: actor, action: RetryRendersRequest.op, target: ["renderId": renderId], affected: 1)
            }
            return .init(dryRun: dryRun, renderIds: [renderId])
        }
        let limit = try PageCursor.limit(request.limit, default: RetryRendersRequest.defaultLimit, max: RetryRendersRequest.maxLimit)
        if let code = request.failureCode, RenderFailureCode(rawValue: code) == nil {
            let codes = RenderFailureCode.allCases.map(\.rawValue).joined(separator: ", ")
            throw DispatcherError(.badArgument, "args.failureCode: '\(code)' is not one of \(codes)")
        }
        let filter = RenderRetries.Filter(
            errorCode: request.errorCode, failureCode: request.failureCode, provider: request.provider, failedSince: request.since, limit: limit)
        let failed = try await retries.failed(filter)
        guard !dryRun else { return .init(dryRun: true, renderIds: failed) }
        var retried: [String] = []
        var refused: [RetryRendersRequest.Refused] = []
        for id in failed {
            do {
                _ = try await retries.retry(id: id)
                retried.append(id)
            } catch let error where error is RenderRetryError || error is RenderRequestError {
                // This render's refusal (no credit left, ended meanwhile…); the others go on.
                let refusal = DispatcherError(mapping: error)
                refused.append(.init(renderId: id, code: refusal.code, message: refusal.message))
            }
        }
        try await control.record(actor: actor, action: RetryRendersRequest.op, target: filter, affected: retried.count)
        return .init(dryRun: false, renderIds: retried, refused: refused)
    }
}

extension DispatcherError {
    /// The protocol's code for each refusal of a render retry.
    static func code(of error: RenderRetryError) -> DispatcherErrorCode {
        switch error {
        case .notFound: .notFound
        case .notFailed, .jobNotEnded: .renderNotRetryable
        }
    }
}
