import FleetAccess
import DispatcherProtocol
import FleetQueue
import Foundation

// Fleet-wide limits (`docs/queue.md`, "Limits"): readers see them with their use, operators set
// and remove them; every change is in the audit trail under the caller's token name.

/// `limits.list`
public struct LimitsListOperation: DispatcherOperation {
    public var access: OperationAccess { .readers }
    let control: JobControl

    public func run(_ request: LimitsListRequest) async throws -> LimitsResult {
        LimitsResult(changed: nil, limits: try await LimitView.all(control))
    }
}

/// `limit.set`
public struct LimitSetOperation: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let control: JobControl
    let changed: @Sendable () -> Void

    public func run(_ request: LimitSetRequest) async throws -> LimitsResult {
        let window = request.rateWindowSeconds ?? 60
        guard window > 0, window <= 3600 else { throw DispatcherError(.badArgument, "args.rateWindowSeconds must be within (0, 3600]") }
        let limit = ConcurrencyLimit(key: request.key, maxRunning: request.maxRunning, rate: request.rate, rateWindow: .seconds(window))
        do {
            try await control.setLimit(limit, actor: Caller.current?.name ?? "unknown")
        } catch let error as QueueError {
            throw DispatcherError(.badArgument, "\(error)")
        }
        changed()
        return LimitsResult(changed: true, limits: try await LimitView.all(control))
    }
}

/// `limit.remove`
public struct LimitRemoveOperation: DispatcherOperation {
    public var access: OperationAccess { .operators }
    let control: JobControl
    let changed: @Sendable () -> Void

    public func run(_ request: LimitRemoveRequest) async throws -> LimitsResult {
        let removed = try await control.removeLimit(key: request.key, actor: Caller.current?.name ?? "unknown")
        if removed { changed() }
        return LimitsResult(changed: removed, limits: try await LimitView.all(control))
    }
}

extension LimitView {
    static func all(_ control: JobControl) async throws -> [LimitView] {
        try await control.limits().map { rule, usage in
            LimitView(key: rule.key, maxRunning: rule.maxRunning, rate: rule.rate, rateWindowSeconds: rule.rateWindow.seconds,
                      effectiveRate: rule.effectiveRate,
                      keys: usage.map { KeyUse(key: $0.key, running: $0.running, startedInWindow: $0.startedInWindow, waiting: $0.waiting) })
        }
    }
}
