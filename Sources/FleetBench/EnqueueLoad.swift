import DispatcherProtocol
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// What one window of single enqueues measured.
struct SingleEnqueueWindow {
    let rate: Double
    /// Per request, from its write to its answer, in milliseconds.
    let p50: Double
    let p99: Double
    /// CPU milliseconds per job: the load generator's (this process), the server's (nil: not measured).
    let clientCPUPerJob: Double
    let serverCPUPerJob: Double?
}

/// Drives single `enqueue` requests over the dispatcher's TCP socket from `connections`
/// connections, one request in flight each (a backend's request handlers, each enqueueing one
/// job and waiting for it), with NIO handlers on the event loops: no task or JSON coding per
/// request, so the generator stays far from being the limit (its CPU is reported).
struct EnqueueLoad {
    let port: Int
    let token: String
    let connections: Int

    func measure(warmUp: Duration, window: Duration, serverPID: pid_t) async throws -> SingleEnqueueWindow {
        let connected = try await connect()
        defer { connected.close() }
        let (drivers, channels) = (connected.drivers, connected.channels)
        for (driver, channel) in zip(drivers, channels) { channel.eventLoop.execute { driver.start() } }
        try await Task.sleep(for: warmUp)

        let clientCPU = processCPUSeconds()
        let serverCPU = CPUTime.ofProcess(serverPID)
        let started = ContinuousClock.now
        for (driver, channel) in zip(drivers, channels) { try await channel.eventLoop.submit { driver.startMeasuring() }.get() }
        try await Task.sleep(for: window)
        var latencies: [Double] = []
        var failures = 0
        for (driver, channel) in zip(drivers, channels) {
            let (measured, failed) = try await channel.eventLoop.submit { driver.stop() }.get()
            latencies += measured
            failures += failed
        }
        let elapsed = (ContinuousClock.now - started) / .seconds(1)
        let serverSeconds = CPUTime.ofProcess(serverPID).map { after in serverCPU.map { after - $0 } } ?? nil
        let clientSeconds = processCPUSeconds() - clientCPU
        // Let the last requests of the stopped drivers be answered before the connections close.
        try await Task.sleep(for: .milliseconds(200))
        guard failures == 0 else { throw BenchError("\(failures) enqueues failed") }
        guard !latencies.isEmpty else { throw BenchError("no enqueue answered in \(window)") }
        latencies.sort()
        let jobs = Double(latencies.count)
        return SingleEnqueueWindow(
            rate: jobs / elapsed, p50: percentile(latencies, 0.50), p99: percentile(latencies, 0.99),
            clientCPUPerJob: clientSeconds * 1000 / jobs, serverCPUPerJob: serverSeconds.map { $0 * 1000 / jobs })
    }

    /// The connections, greeted and authenticated, each driver idle.
    func connect() async throws -> EnqueueConnections {
        let group = MultiThreadedEventLoopGroup.singleton
        let drivers = (0..<connections).map { _ in EnqueueDriver(token: token) }
        var channels: [any Channel] = []
        do {
            for driver in drivers {
                let channel = try await ClientBootstrap(group: group)
                    .channelOption(.socketOption(.tcp_nodelay), value: 1)
                    .channelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(FrameReader(maxFrameBytes: 1 << 20))
                            try channel.pipeline.syncOperations.addHandler(driver)
                        }
                    }
                    .connect(host: "127.0.0.1", port: port).get()
                channels.append(channel)
            }
            for (driver, channel) in zip(drivers, channels) { try await driver.authenticated(on: channel).get() }
        } catch {
            channels.forEach { $0.close(promise: nil) }
            throw error
        }
        return EnqueueConnections(drivers: drivers, channels: channels)
    }
}

/// Authenticated connections of `EnqueueLoad`, for a fixed number of requests at a time: the
/// work is the same however fast the machine is, so what the server spends on it can be
/// counted (`fleet-bench enqueue-cost`).
struct EnqueueConnections {
    fileprivate let drivers: [EnqueueDriver]
    let channels: [any Channel]

    /// Sends `count` enqueues, split evenly over the connections, each a closed loop; returns
    /// when every one is answered.
    func send(count: Int) async throws {
        var futures: [EventLoopFuture<Int>] = []
        for (index, (driver, channel)) in zip(drivers, channels).enumerated() {
            let share = count / drivers.count + (index < count % drivers.count ? 1 : 0)
            futures.append(channel.eventLoop.flatSubmit { driver.send(count: share) })
        }
        var failures = 0
        for future in futures { failures += try await future.get() }
        guard failures == 0 else { throw BenchError("\(failures) enqueues failed") }
    }

    func close() {
        channels.forEach { $0.close(promise: nil) }
    }
}

/// One connection's closed loop: greeting, `auth`, then one `enqueue` after another, each sent
/// when the previous one is answered. Used only on its channel's event loop.
fileprivate final class EnqueueDriver: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum Phase { case greeting, authenticating, ready, running, counting, stopped }

    private let token: String
    private var phase = Phase.greeting
    private var context: ChannelHandlerContext?
    private var authenticatedPromise: EventLoopPromise<Void>?
    private var nextID = 1
    private var sentAt = ContinuousClock.now
    private var measuring = false
    private var latencies: [Double] = []
    private var failures = 0
    /// Counted mode: answers still to come, and the promise of the failures among them.
    private var remaining = 0
    private var counted: EventLoopPromise<Int>?
    private static let ok = Array(#""ok":true"#.utf8)

    init(token: String) { self.token = token }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        authenticatedPromise = context.eventLoop.makePromise()
    }

    func authenticated(on channel: any Channel) -> EventLoopFuture<Void> {
        channel.eventLoop.flatSubmit { self.authenticatedPromise!.futureResult }
    }

    func start() {
        phase = .running
        send()
    }

    func startMeasuring() {
        measuring = true
        latencies = []
        latencies.reserveCapacity(1 << 14)
    }

    /// Sends `count` enqueues one after another; the future gives how many failed, once the
    /// last is answered.
    func send(count: Int) -> EventLoopFuture<Int> {
        guard let context, count > 0 else { return MultiThreadedEventLoopGroup.singleton.any().makeSucceededFuture(0) }
        phase = .counting
        remaining = count
        failures = 0
        let promise = context.eventLoop.makePromise(of: Int.self)
        counted = promise
        send()
        return promise.futureResult
    }

    /// Stops sending; returns what was measured (milliseconds per request) and the failures.
    func stop() -> ([Double], Int) {
        phase = .stopped
        measuring = false
        return (latencies, failures)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch phase {
        case .greeting:
            phase = .authenticating
            write(#"{"id":0,"op":"auth","args":{"token":"\#(token)"}}"#)
        case .authenticating:
            phase = .ready
            if contains(frame, Self.ok) { authenticatedPromise?.succeed() } else {
                authenticatedPromise?.fail(BenchError("auth refused: \(String(buffer: frame))"))
            }
        case .running:
            if measuring {
                latencies.append((ContinuousClock.now - sentAt) / .milliseconds(1))
                if !contains(frame, Self.ok) { failures += 1 }
            }
            send()
        case .counting:
            if !contains(frame, Self.ok) { failures += 1 }
            remaining -= 1
            guard remaining == 0 else { return send() }
            phase = .ready
            counted?.succeed(failures)
            counted = nil
        case .ready, .stopped:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        counted?.fail(BenchError("the dispatcher closed a connection"))
        counted = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        authenticatedPromise?.fail(error)
        counted?.fail(error)
        counted = nil
        failures += 1
        context.close(promise: nil)
    }

    private func send() {
        sentAt = ContinuousClock.now
        nextID += 1
        write(#"{"id":\#(nextID),"op":"enqueue","args":{"kind":"drill.noop","payload":{"n":\#(nextID)}}}"#)
    }

    private func write(_ text: String) {
        guard let context else { return }
        context.writeAndFlush(wrapOutboundOut(lineFrame(text, allocator: context.channel.allocator)), promise: nil)
    }

    private func contains(_ frame: ByteBuffer, _ needle: [UInt8]) -> Bool {
        frame.readableBytesView.withContiguousStorageIfAvailable { firstOffset(of: needle, in: $0) != nil }
            ?? String(buffer: frame).contains(String(decoding: needle, as: UTF8.self))
    }
}

/// `text` and a newline, one frame of the dispatcher's protocol, written as the bench's
/// connections send their requests (no JSON coding).
func lineFrame(_ text: String, allocator: ByteBufferAllocator) -> ByteBuffer {
    var buffer = allocator.buffer(capacity: text.utf8.count + 1)
    buffer.writeString(text)
    buffer.writeInteger(UInt8(ascii: "\n"))
    return buffer
}

/// Where `needle` first starts in `bytes`; nil when it does not occur.
func firstOffset(of needle: [UInt8], in bytes: UnsafeBufferPointer<UInt8>) -> Int? {
    guard bytes.count >= needle.count else { return nil }
    return (0...(bytes.count - needle.count)).first { start in needle.indices.allSatisfy { bytes[start + $0] == needle[$0] } }
}

/// CPU seconds (user and system) this process has used.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

enum CPUTime {
    /// CPU seconds (user and system) another process has used, from /proc; nil where unreadable.
    static func ofProcess(_ pid: pid_t) -> Double? {
        ticks(of: pid, withReapedChildren: false).map(seconds)
    }

    /// utime + stime of a process from /proc (and cutime + cstime, its reaped children's, when
    /// `withReapedChildren`), in clock ticks; nil where unreadable.
    static func ticks(of pid: pid_t, withReapedChildren: Bool) -> Int? {
        let used = withReapedChildren ? 11...14 : 11...12
        guard let fields = statFields(of: pid), fields.count > used.upperBound else { return nil }
        let values = used.compactMap { Int(fields[$0]) }
        return values.count == used.count ? values.reduce(0, +) : nil
    }

    /// The user and the system (kernel) CPU seconds of another process, apart; nil where unreadable.
    static func split(of pid: pid_t) -> (user: Double, system: Double)? {
        guard let fields = statFields(of: pid), fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return (seconds(user), seconds(system))
    }

    /// The fields of /proc/PID/stat after the command name: state is field 0, utime 11, stime 12,
    /// cutime 13, cstime 14.
    private static func statFields(of pid: pid_t) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: end)...].split(separator: " ")
    }

    static func seconds(_ ticks: Int) -> Double { Double(ticks) / Double(sysconf(Int32(_SC_CLK_TCK))) }
}
