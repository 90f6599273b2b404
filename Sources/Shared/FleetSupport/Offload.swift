import Dispatch

/// Runs blocking, CPU-bound work (libvips) on a dispatch thread, so Swift's cooperative
/// threads stay free for I/O. The default queue runs about one item per core; work that
/// mostly waits (fsync) goes to `blockingIO` instead, so it never queues behind, or in
/// front of, the CPU work.
public func offload<T: Sendable>(on queue: DispatchQueue = .global(qos: .userInitiated), _ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        queue.async { continuation.resume(with: Result { try work() }) }
    }
}

/// For blocking system calls: a concurrent queue of its own, which (unlike the global queues)
/// starts another thread when its threads are all blocked.
public let blockingIO = DispatchQueue(label: "blocking-io", attributes: .concurrent)
