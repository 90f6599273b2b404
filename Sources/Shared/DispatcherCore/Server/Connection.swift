import DispatcherProtocol
import Logging
import NIOCore
import ServiceLifecycle

/// How a client reached the server: TCP requires `auth`; the Unix socket relies on its file permissions.
public enum Transport: String, Sendable {
    case tcp, unix
}

/// Serves one connection: the greeting, then frames read in order and their operations run
/// concurrently (at most `maxInFlight`; reading pauses beyond that), each response written
/// when ready. A connection-level error (frame too large or too slow, idle, wrong token) is
/// answered with `id: null`, then the connection is closed.
struct Connection: Sendable {
    let router: RequestRouter
    let greeting: @Sendable (Transport) -> Greeting
    let idleTimeout: Duration
    /// A connection whose answers wait this long with none taken by the socket is closed: its
    /// client stopped reading, and it must not hold its requests (nor a graceful shutdown) forever.
    let writeTimeout: Duration
    let maxInFlight: Int
    let logger: Logger

    /// How long a closing connection keeps draining input, so the client reads our last frame
    /// rather than a reset.
    static let linger = TimeAmount.seconds(1)
    /// Before `auth`, each refused frame holds the connection's reading this long: a client
    /// that has not authenticated gets at most ten refusals a second, whatever it sends, so
    /// unauthenticated connections cannot take the CPU from authenticated ones.
    static let unauthenticatedRefusalPause = Duration.milliseconds(100)
    /// Response bytes made but not yet handed to the socket beyond which no new request of the
    /// connection starts (`PendingOutput`).
    static let maxPendingOutputBytes = 1 << 20
    /// Beyond this the client is not reading what it asked for (the requests already running
    /// when its output backed up answered on top): the connection is closed.
    static let closePendingOutputBytes = 8 << 20

    func serve(_ channel: NIOAsyncChannel<ByteBuffer, ByteBuffer>, transport: Transport) async {
        do {
            try await channel.executeThenClose { inbound, outbound in
                let pending = PendingOutput(limit: Self.maxPendingOutputBytes)
                let writer = FrameWriter(channel: channel.channel, outbound: outbound, pending: pending, logger: logger) { [logger] in
                    guard pending.bytes > Self.closePendingOutputBytes else { return }
                    logger.warning("closing a connection that does not read its answers", metadata: ["pending_bytes": "\(pending.bytes)"])
                    channel.channel.close(promise: nil)
                }
                try await writer.send(greeting(transport))
                let activity = ConnectionActivity()
                let ending = try await withThrowingTaskGroup(of: ServerResponse?.self) { group in
                    group.addTask { try await watch(activity, pending, channel.channel) }
                    group.addTask {
                        try await withGracefulShutdownHandler {
                            try await readFrames(inbound, writer, activity, Session.start(on: transport)) {
                                // Frames may be full size once the client is authenticated.
                                let pipeline = channel.channel.pipeline
                                channel.channel.eventLoop.execute {
                                    try? pipeline.syncOperations.handler(type: FrameReader.self).authenticated()
                                }
                            }
                        } onGracefulShutdown: {
                            // Read no more; what is in flight still gets its answer.
                            channel.channel.close(mode: .input, promise: nil)
                        }
                    }
                    defer { group.cancelAll() }
                    return try await group.next() ?? nil
                }
                if let ending { try await closeAfter(ending, writer, channel.channel) }
            }
        } catch {
            logger.debug("connection ended", metadata: ["error": "\(error)"])
        }
    }

    /// Returns the frame to end on when the connection has been idle for `idleTimeout`; closes it
    /// (no frame: the client reads none) when its answers have waited `writeTimeout` with none
    /// taken. It looks at least every half `writeTimeout`, so a stalled reader is closed within
    /// one and a half of it.
    private func watch(_ activity: ConnectionActivity, _ pending: PendingOutput, _ channel: any Channel) async throws -> ServerResponse? {
        while let idleDeadline = activity.idleDeadline(after: idleTimeout) {
            let now = ContinuousClock.now
            if let since = pending.stalledSince, now - since >= writeTimeout {
                logger.warning("closing a connection that stopped reading its answers", metadata: [
                    "pending_bytes": "\(pending.bytes)", "write_timeout": "\(writeTimeout)",
                ])
                channel.close(promise: nil)
                return nil
            }
            let stallDeadline = pending.stalledSince.map { $0 + writeTimeout } ?? now + writeTimeout / 2
            try await Task.sleep(until: min(idleDeadline, stallDeadline))
        }
        return .failure(nil, .idleTimeout, "nothing received for \(idleTimeout); closing")
    }

    /// Reads frames until the input ends (all in-flight requests then answered, returns nil) or a
    /// connection-level error (returns the frame to end on).
    private func readFrames(
        _ inbound: NIOAsyncChannelInboundStream<ByteBuffer>, _ writer: FrameWriter, _ activity: ConnectionActivity, _ session: Session,
        onAuthenticated: @escaping @Sendable () -> Void
    ) async throws -> ServerResponse? {
        var session = session
        return try await withThrowingDiscardingTaskGroup { requests in
            do {
                for try await frame in inbound {
                    // An answer could not be written (the connection was closed under it, e.g.
                    // with too much output waiting): the group is cancelled, and the frames the
                    // client sent before the close are not run for no one to read.
                    if requests.isCancelled { break }
                    activity.touch()
                    let wasAuthenticated = session.isAuthenticated
                    let routing = router.route(frame, session: &session)
                    if session.isAuthenticated, !wasAuthenticated { onAuthenticated() }
                    switch routing {
                    case .reply(let response):
                        try await writer.send(response)
                        if !session.isAuthenticated, case .failure = response.outcome {
                            try await Task.sleep(for: Self.unauthenticatedRefusalPause)
                        }
                    case .replyAndClose(let response):
                        requests.cancelAll()
                        return response
                    case .run(let id, let op, let call):
                        await admit(writer, activity)
                        requests.addTask {
                            let response: ServerResponse
                            do {
                                response = ServerResponse(id: id, outcome: .success(try await call()))
                            } catch {
                                response = failure(id, op, error)
                            }
                            defer { activity.end() }
                            try await writer.send(response)
                        }
                    case .start(let id, let op, let start):
                        await admit(writer, activity)
                        start { result in
                            defer { activity.end() }
                            switch result {
                            case .success(let value): writer.sendNow(ServerResponse(id: id, outcome: .success(value)))
                            case .failure(let error): writer.sendNow(failure(id, op, error))
                            }
                        }
                    }
                }
            } catch let error as FrameError {
                requests.cancelAll()
                return switch error {
                case .tooLarge: .failure(nil, .frameTooLarge, "\(error); closing")
                case .timedOut: .failure(nil, .frameTimeout, "\(error); closing")
                }
            }
            // The input ended: every request still gets its answer.
            await activity.waitUntilInFlight(atMost: 0)
            return nil
        }
    }

    /// Waits until the connection may begin one more request, and counts it as begun.
    private func admit(_ writer: FrameWriter, _ activity: ConnectionActivity) async {
        await activity.waitUntilInFlight(atMost: maxInFlight - 1)
        // A client that does not read its answers gets no new ones made.
        await writer.pending.waitUntilWithinLimit()
        activity.begin()
    }

    private func failure(_ id: RequestID, _ op: String, _ error: any Error) -> ServerResponse {
        let mapped = DispatcherError(mapping: error)
        if mapped.code == .internal || mapped.code == .unavailable {
            logger.error("operation failed", metadata: ["op": "\(op)", "error": "\(error)"])
        }
        return ServerResponse(id: id, outcome: .failure(mapped))
    }

    /// Sends the last frame, ends our output, and keeps draining input until the client closes or
    /// `linger` passes: closing with unread input would reset the connection and lose the frame.
    private func closeAfter(_ response: ServerResponse, _ writer: FrameWriter, _ channel: any Channel) async throws {
        try await writer.send(response)
        channel.close(mode: .output, promise: nil)
        channel.eventLoop.scheduleTask(in: Self.linger) { channel.close(promise: nil) }
        try? await channel.closeFuture.get()
    }
}

/// Writes frames on a connection's outbound side; any number of tasks may write at once. Each
/// frame counts as pending output from when it is made until the pipeline takes it (a write
/// suspends while the socket is not writable), or, written from a callback (`sendNow`), until
/// the socket does.
struct FrameWriter: Sendable {
    let channel: any Channel
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    let pending: PendingOutput
    let logger: Logger
    /// Called after each frame is counted: closes the connection when too much waits.
    let checkPending: @Sendable () -> Void
    private let encoder = WireFormat.makeEncoder()

    init(channel: any Channel, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>, pending: PendingOutput, logger: Logger,
         checkPending: @escaping @Sendable () -> Void = {}) {
        self.channel = channel
        self.outbound = outbound
        self.pending = pending
        self.logger = logger
        self.checkPending = checkPending
    }

    private func write(_ frame: ByteBuffer) async throws {
        let size = frame.readableBytes
        pending.add(size)
        defer { pending.remove(size) }
        checkPending()
        try await outbound.write(frame)
    }

    func send(_ greeting: Greeting) async throws {
        try await write(try WireFormat.frame(greeting, encoder: encoder))
    }

    func send(_ response: ServerResponse) async throws {
        try await write(try frame(response))
    }

    /// Writes without suspending, from whatever thread answers (an `AnsweringOperation`'s
    /// callback): the frame goes straight to the channel, and counts as pending until the
    /// socket has taken it. A connection already closed drops it.
    func sendNow(_ response: ServerResponse) {
        guard let frame = try? frame(response) else { return }
        let size = frame.readableBytes
        pending.add(size)
        checkPending()
        channel.writeAndFlush(frame).whenComplete { [pending] _ in pending.remove(size) }
    }

    private func frame(_ response: ServerResponse) throws -> ByteBuffer {
        do {
            return try response.handEncodedFrame ?? WireFormat.frame(response, encoder: encoder)
        } catch {
            logger.error("response not encodable", metadata: ["error": "\(error)"])
            return try WireFormat.frame(ServerResponse.failure(response.id, .internal, "internal error"), encoder: encoder)
        }
    }
}
