import Dispatch

/// Runs blocking, CPU-bound work (libvips) on a dispatch thread, so Swift's cooperative
/// threads stay free for I/O.
public func offload<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global(qos: .userInitiated).async { continuation.resume(with: Result { try work() }) }
    }
}
