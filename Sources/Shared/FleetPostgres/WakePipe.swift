import Glibc

/// A pipe whose read end a thread waits on beside a socket, so that another thread can wake it
/// at once (the notifier's subscriptions changed, or it must stop) instead of after its timeout.
final class WakePipe: Sendable {
    private let readEnd: Int32
    private let writeEnd: Int32

    enum Wait { case readable, woken, timedOut, failed }

    init() {
        var ends: [Int32] = [0, 0]
        // Only fails when the process is out of file descriptors, at start-up: nothing could run.
        precondition(pipe(&ends) == 0, "cannot create a pipe: errno \(errno)")
        for end in ends {
            // Neither end may block: a poke on a full pipe and the drain of an empty one return at once.
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        (readEnd, writeEnd) = (ends[0], ends[1])
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Wakes the waiting thread. A full pipe already will, so a failed write loses nothing.
    func poke() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    /// Waits until `socket` is readable, a poke, or `timeout`; pokes are consumed.
    @discardableResult
    func wait(for timeout: Duration, orReadable socket: Int32 = -1) -> Wait {
        var descriptors = [pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)]
        if socket >= 0 { descriptors.append(pollfd(fd: socket, events: Int16(POLLIN), revents: 0)) }
        let milliseconds = Int32(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        let ready = poll(&descriptors, nfds_t(descriptors.count), milliseconds)
        if ready < 0 { return errno == EINTR ? .woken : .failed }
        if ready == 0 { return .timedOut }
        if descriptors[0].revents != 0 { drain() }
        if socket >= 0 && descriptors[1].revents != 0 { return .readable }
        return .woken
    }

    private func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(readEnd, &buffer, buffer.count) > 0 {}
    }
}
