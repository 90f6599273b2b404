import Synchronization

/// Unready until the process has started (migrations applied, services built): `/healthz`
/// answers from the first moment, `/readyz` says 503 "starting" until then.
public final class StartupSignal: ReadinessCheck {
    private let started = Atomic(false)

    public init() {}

    public func markStarted() { started.store(true, ordering: .releasing) }

    public func unreadyReason() async -> String? {
        started.load(ordering: .acquiring) ? nil : "starting: applying database migrations"
    }
}
