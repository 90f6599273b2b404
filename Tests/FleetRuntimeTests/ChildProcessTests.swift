import FleetSupport
import Foundation
import Glibc
import Testing

/// A child process inherits only its standard streams. Anything else it inherited (a server's
/// accepted socket: NIO accepts without close-on-exec) would stay open in it after the parent
/// closed it, and the peer would never see the close.
@Suite struct ChildProcessTests {
    @Test func aChildInheritsNoDescriptorOfItsParentButItsStandardStreams() throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer { ends.forEach { close($0) } }
        // The pipe is open in this process without close-on-exec, as NIO's sockets are.
        #expect(fcntl(ends[1], F_GETFD) & FD_CLOEXEC == 0)
        let pipeEnds = Set(try ends.map { try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)") })
        let child = try ChildProcess("/bin/sleep", ["600"], environment: [:])
        defer { child.signal(SIGKILL) }
        // What the child holds past its standard streams, by what each descriptor is: its own
        // dynamic loader may briefly hold a library open, so the check is for the parent's pipe,
        // not for an empty table (a descriptor closed between the listing and its link is gone).
        let held = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(child.pid)/fd").compactMap(Int32.init).filter { $0 > 2 }
            .compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(child.pid)/fd/\($0)") }
        #expect(pipeEnds.count == 1 && pipeEnds.first!.hasPrefix("pipe:"))
        #expect(pipeEnds.isDisjoint(with: held), "the child holds \(held)")
    }
}
