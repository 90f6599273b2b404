import ServiceLifecycle
import Synchronization

/// Set once graceful shutdown starts; `/readyz` then answers 503 so traffic moves elsewhere.
public final class DrainSignal: ReadinessCheck {
    private let draining = Atomic(false)

    public init() {}

    public var isDraining: Bool { draining.load(ordering: .acquiring) }

    public func unreadyReason() async -> String? { isDraining ? "draining: graceful shutdown in progress" : nil }

    /// The service that raises the signal. Put it last in the ServiceGroup: services stop in
    /// reverse order, so it is the first to learn of the shutdown, before anything drains.
    public var sentinel: any Service { Sentinel(signal: self) }

    private struct Sentinel: Service {
        let signal: DrainSignal

        func run() async throws {
            try? await gracefulShutdown()
            signal.draining.store(true, ordering: .releasing)
        }
    }
}
