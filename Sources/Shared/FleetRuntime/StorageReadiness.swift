import FleetHTTP
import FleetStorage
import FleetSupport
import Logging
import ServiceLifecycle
import Synchronization

/// Whether the process's image store takes work: `ImageStorage.checkAccess` (the store reachable,
/// a probe object written where the fleet writes, then deleted) at start and every `interval`.
/// While it fails, `/readyz` answers 503 naming the store and the worker claims no jobs (its
/// every kind reads or writes images); one log line says so when the state changes, naming the
/// variable to fix when the check's error names one.
public final class StorageReadiness: ReadinessCheck, Service {
    let storage: any ImageStorage
    let summary: String
    let interval: Duration
    let logger: Logger
    /// Why the store is not usable; nil: it is.
    private let problem = Mutex<String?>("not checked yet")

    public init(storage: any ImageStorage, summary: String, interval: Duration = .seconds(15), logger: Logger) {
        self.storage = storage
        self.summary = summary
        self.interval = interval
        self.logger = logger
    }

    public var isReachable: Bool { problem.withLock { $0 == nil } }

    public func unreadyReason() async -> String? {
        problem.withLock { $0 }.map { "storage: \($0)" }
    }

    /// Checks the store once, logging when the answer differs from the last.
    public func check() async {
        var variable: String?
        let reason: String?
        do {
            try await storage.checkAccess()
            reason = nil
        } catch let error as ConfigurationError {
            variable = error.variable
            reason = "\(error)"
        } catch {
            reason = "\(error)"
        }
        let previous = problem.withLock { problem in
            defer { problem = reason }
            return problem
        }
        guard previous != reason else { return }
        if let reason {
            var metadata: Logger.Metadata = ["storage": "\(summary)", "error": "\(reason)"]
            if let variable { metadata["variable"] = "\(variable)" }
            logger.error("storage unusable: not claiming jobs until it is", metadata: metadata)
        } else {
            logger.info("storage ready", metadata: ["storage": "\(summary)"])
        }
    }

    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            await repeatEvery(self.interval) { await self.check() }
        }
    }
}
