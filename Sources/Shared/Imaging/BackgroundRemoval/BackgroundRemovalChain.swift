import FleetSupport
import Foundation
import Logging
import Metrics

/// The backends in their configured order: a transient failure moves to the next one, a
/// refusal ends the chain.
/// An answer that is not a usable cut-out counts as a transient failure of its backend.
public struct BackgroundRemovalChain: Sendable {
    public let backends: [any BackgroundRemover]
    public let composer: CutoutComposer

    public init(backends: [any BackgroundRemover], composer: CutoutComposer = CutoutComposer()) {
        precondition(!backends.isEmpty, "a chain needs at least one backend")
        self.backends = backends
        self.composer = composer
    }

    public struct Result: Sendable {
        public let cutout: Cutout
        public let backend: String
        /// Transient failures of the backends tried before it.
        public let skipped: [String]
    }

    public func cutout(of photo: Data, logger: Logger) async throws -> Result {
        var failures: [String] = []
        for backend in backends {
            let started = ContinuousClock.now
            do {
                let answer = try await backend.cutout(of: photo)
                let composer = self.composer
                let cutout: Cutout
                do {
                    cutout = try await offload { try composer.compose(photo: photo, cutout: answer) }
                } catch let unusable as CutoutComposer.UnusableCutout {
                    throw BackgroundRemovalError.transient(backend: backend.name, reason: unusable.reason)
                }
                record(backend, outcome: "success", since: started)
                return Result(cutout: cutout, backend: backend.name, skipped: failures)
            } catch let error as BackgroundRemovalError {
                if case .rejected = error {
                    record(backend, outcome: "rejected", since: started)
                    throw error
                }
                record(backend, outcome: "transient", since: started)
                logger.warning("background removal failed; trying the next backend", metadata: ["backend": "\(backend.name)", "error": "\(error)"])
                failures.append("\(error)")
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                // libvips failures on the photo itself are the caller's to classify.
                record(backend, outcome: "error", since: started)
                throw error
            }
        }
        throw BackgroundRemovalError.unavailable(reasons: failures)
    }

    private func record(_ backend: any BackgroundRemover, outcome: String, since started: ContinuousClock.Instant) {
        Counter(label: "fleet_cutout_backend_total", dimensions: [("backend", backend.name), ("outcome", outcome)]).increment()
        Timer(label: "fleet_cutout_backend_seconds", dimensions: [("backend", backend.name)])
            .recordNanoseconds(Int64((ContinuousClock.now - started).seconds * 1e9))
    }
}
