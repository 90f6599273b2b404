import FleetSupport
import Foundation
import Glibc
import Testing

/// A child process holds only its standard streams. Anything else it inherited (a server's
/// accepted socket: NIO accepts without close-on-exec) would stay open in it after the parent
/// closed it, and the peer would never see the close.
@Suite struct ChildProcessTests {
    @Test func aChildInheritsOnlyItsStandardStreams() throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { ends.forEach { close($0) } }
        // The pipe is open in this process without close-on-exec, as NIO's sockets are.
        #expect(fcntl(ends[1], F_GETFD) & FD_CLOEXEC == 0)
        let child = try ChildProcess("/bin/sleep", ["600"], environment: [:])
        defer { child.signal(SIGKILL) }
        // posix_spawn returns once the child has executed its program: its table is final.
        let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(child.pid)/fd").compactMap(Int32.init).sorted()
        #expect(open == [0, 1, 2])
    }
}
