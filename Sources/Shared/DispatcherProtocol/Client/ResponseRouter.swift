import Foundation
import NIOCore

/// A request on its way out, with the promise its response fulfils.
struct PendingRequest: Sendable {
    let id: Int64
    let frame: ByteBuffer
    let promise: EventLoopPromise<ByteBuffer>
}

/// The client's end of the pipeline: writes requests, and hands each response frame to the
/// request with its id, in whatever order they come. Lives on the channel's event loop.
final class ResponseRouter: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = PendingRequest
    typealias OutboundOut = ByteBuffer

    private let greeting: EventLoopPromise<ByteBuffer>
    private var greeted = false
    private var pending: [Int64: EventLoopPromise<ByteBuffer>] = [:]
    /// Why the connection ended, once it did; later requests fail with it at once.
    private var closedBecause: (any Error)?
    private let decoder = WireFormat.makeDecoder()

    init(greeting: EventLoopPromise<ByteBuffer>) {
        self.greeting = greeting
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        if let closedBecause {
            request.promise.fail(closedBecause)
            promise?.fail(closedBecause)
            return
        }
        pending[request.id] = request.promise
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenFailure { [self] error in
            pending.removeValue(forKey: request.id)?.fail(error)
        }
        written.futureResult.cascade(to: promise)
        context.write(wrapOutboundOut(request.frame), promise: written)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard greeted else {
            greeted = true
            greeting.succeed(frame)
            return
        }
        guard let header = try? decoder.decode(ResponseHeader.self, from: Data(frame.readableBytesView)) else {
            return failAll(context, DispatcherClientError.unexpectedFrame(String(buffer: frame).prefix(200).description))
        }
        switch header.id {
        case .number(let id)?:
            pending.removeValue(forKey: id)?.succeed(frame)
        case .string?:
            break // Not an id this client sends.
        case nil:
            // About the connection itself (frame too large, timeout): the server closes it next.
            failAll(context, header.error ?? DispatcherClientError.unexpectedFrame(String(buffer: frame).prefix(200).description))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(context, error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(context, DispatcherClientError.connectionClosed)
        context.fireChannelInactive()
    }

    /// A connect that fails after the pipeline was built (nothing listening yet) removes the
    /// handler without the channel ever being active: the greeting must still end.
    func handlerRemoved(context: ChannelHandlerContext) {
        if !greeted {
            greeted = true
            greeting.fail(closedBecause ?? DispatcherClientError.connectionClosed)
        }
        let failed = pending
        pending = [:]
        for promise in failed.values { promise.fail(closedBecause ?? DispatcherClientError.connectionClosed) }
    }

    private func failAll(_ context: ChannelHandlerContext, _ error: any Error) {
        if closedBecause == nil { closedBecause = error }
        if !greeted {
            greeted = true
            greeting.fail(error)
        }
        let failed = pending
        pending = [:]
        for promise in failed.values { promise.fail(error) }
        context.close(promise: nil)
    }
}
