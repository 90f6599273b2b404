import NIOCore

/// Why a connection's input was refused. After either, the reader drops all further input.
public enum FrameError: Error, Equatable, CustomStringConvertible {
    /// This many bytes arrived without a newline.
    case tooLarge(limit: Int)
    /// A frame's first byte arrived, its newline not within this time.
    case timedOut(after: TimeAmount)

    public var description: String {
        switch self {
        case .tooLarge(let limit): "frame longer than \(limit) bytes"
        case .timedOut(let after): "frame not completed within \(after.nanoseconds / 1_000_000) ms"
        }
    }
}

/// Splits a byte stream into newline-delimited frames (without the newline, or a "\r" before it;
/// lines of nothing but spaces and tabs are skipped). Nothing is buffered beyond `maxFrameBytes`: a longer frame is
/// refused as soon as that many bytes are in hand. With `frameTimeout`, a frame must be completed
/// within that time of its first byte, so a client that sends half a frame and stalls is found
/// out. The clock runs only while the channel is reading: when a handler further on holds reads
/// back (backpressure), the rest of the frame may be waiting in the socket, which is not the
/// client's fault; the frame gets a fresh `frameTimeout` when reading resumes. Either failure is
/// fired as a `FrameError`.
public final class FrameReader: ChannelDuplexHandler, RemovableChannelHandler {
    public typealias InboundIn = ByteBuffer
    public typealias InboundOut = ByteBuffer
    public typealias OutboundIn = Never

    private let fullLimit: Int
    /// `maxFrameBytes`, or the smaller limit before the connection is authenticated.
    private var maxFrameBytes: Int
    private let frameTimeout: TimeAmount?
    /// The start of a frame whose newline has not arrived yet.
    private var partial: ByteBuffer?
    private var deadline: Scheduled<Void>?
    /// A read has been asked of the socket and not yet answered: the frame's clock may run.
    private var reading = false
    private var failed = false

    /// With `untilAuthenticated`, frames are at most that long until `authenticated()` (on the
    /// channel's event loop) lifts the limit to `maxFrameBytes`: a connection that has not
    /// authenticated is cut off at its first kilobyte, never buffering a megabyte.
    public init(maxFrameBytes: Int, untilAuthenticated: Int? = nil, frameTimeout: TimeAmount? = nil) {
        self.fullLimit = maxFrameBytes
        self.maxFrameBytes = min(maxFrameBytes, untilAuthenticated ?? maxFrameBytes)
        self.frameTimeout = frameTimeout
    }

    /// Lifts the limit to `maxFrameBytes`. Call on the channel's event loop.
    public func authenticated() {
        maxFrameBytes = fullLimit
    }

    public func read(context: ChannelHandlerContext) {
        reading = true
        armDeadline(context)
        context.read()
    }

    public func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        context.fireChannelReadComplete()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        var input = unwrapInboundIn(data)
        var completedAFrame = false
        while let newline = input.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) {
            var frame = input.readSlice(length: newline - input.readerIndex)!
            input.moveReaderIndex(forwardBy: 1)
            if var head = partial {
                head.writeBuffer(&frame)
                frame = head
                partial = nil
            }
            guard frame.readableBytes <= maxFrameBytes else { return fail(context, .tooLarge(limit: maxFrameBytes)) }
            completedAFrame = true
            if frame.readableBytesView.last == UInt8(ascii: "\r") { frame.moveWriterIndex(to: frame.writerIndex - 1) }
            // Blank lines, spaces and tabs only included, are skipped.
            if !frame.readableBytesView.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }) {
                context.fireChannelRead(wrapInboundOut(frame))
            }
            // A handler downstream may have closed the channel while reading the frame.
            guard !failed, context.channel.isActive else { return }
        }
        if input.readableBytes > 0 {
            if partial == nil { partial = input } else { partial!.writeBuffer(&input) }
        }
        guard (partial?.readableBytes ?? 0) <= maxFrameBytes else { return fail(context, .tooLarge(limit: maxFrameBytes)) }
        if completedAFrame || partial == nil {
            deadline?.cancel()
            deadline = nil
        }
        armDeadline(context)
    }

    private func armDeadline(_ context: ChannelHandlerContext) {
        guard partial != nil, deadline == nil, let frameTimeout else { return }
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: frameTimeout) { [self] in
            deadline = nil
            // Held back by backpressure: not the client's delay; re-armed at the next read.
            if reading { fail(context, .timedOut(after: frameTimeout)) }
        }
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        partial = nil
        context.fireChannelInactive()
    }

    private func fail(_ context: ChannelHandlerContext, _ error: FrameError) {
        guard !failed else { return }
        failed = true
        partial = nil
        deadline?.cancel()
        deadline = nil
        context.fireErrorCaught(error)
    }
}
