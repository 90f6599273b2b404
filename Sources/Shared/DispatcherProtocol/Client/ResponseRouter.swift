import Foundation
import NIOCore

/// A request on its way out, with the promise its response fulfils.
struct PendingRequest: Sendable {
    let id: Int64
    let frame: ByteBuffer
    let promise: EventLoopPromise<ByteBuffer>
}

/// The connection ended before a request's answer came. `sent`: its frame had been written
/// whole, so the dispatcher may have applied it; otherwise it certainly did not (a frame cut
/// short has no newline, and the server applies only whole frames).
struct ConnectionEnded: Error {
    let sent: Bool
    let cause: any Error
}

/// One request and its answer on one channel.
enum ChannelExchange {
    static func send<Request: DispatcherRequest>(
        _ request: Request, id: Int64, traceparent: TraceParent?, on channel: any Channel, encoder: JSONEncoder, decoder: JSONDecoder,
        written: @escaping @Sendable () -> Void = {}
    ) async throws -> Request.Result {
        let frame = try WireFormat.frame(RequestFrame(id: .number(id), args: request, traceparent: traceparent), encoder: encoder)
        let promise = channel.eventLoop.makePromise(of: ByteBuffer.self)
        // A write that never reaches the router (channel already closed) must still end the wait.
        channel.writeAndFlush(PendingRequest(id: id, frame: frame, promise: promise)).whenComplete { outcome in
            switch outcome {
            case .success: written()
            case .failure(let error): promise.fail(ConnectionEnded(sent: false, cause: error))
            }
        }
        let response = Data(try await promise.futureResult.get().readableBytesView)
        let header = try decoder.decode(ResponseHeader.self, from: response)
        if let error = header.error { throw error }
        return try decoder.decode(ResponseResult<Request.Result>.self, from: response).result
    }
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
            request.promise.fail(ConnectionEnded(sent: false, cause: closedBecause))
            promise?.fail(closedBecause)
            return
        }
        pending[request.id] = request.promise
        let written = context.eventLoop.makePromise(of: Void.self)
        written.futureResult.assumeIsolated().whenFailure { [self] error in
            pending.removeValue(forKey: request.id)?.fail(ConnectionEnded(sent: false, cause: error))
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
        failPending(closedBecause ?? DispatcherClientError.connectionClosed)
    }

    private func failAll(_ context: ChannelHandlerContext, _ error: any Error) {
        if closedBecause == nil { closedBecause = error }
        if !greeted {
            greeted = true
            greeting.fail(error)
        }
        failPending(error)
        context.close(promise: nil)
    }

    /// The server's own error about the connection (FRAME_TOO_LARGE...) is the answer of every
    /// request in flight: sending them again would meet it again. Anything else ended the
    /// connection under them, an idle close too (a request racing it is not to blame).
    private func failPending(_ error: any Error) {
        let failed = pending
        pending = [:]
        let answeredByServer = (error as? DispatcherError).map { $0.code != .idleTimeout } ?? false
        let answer: any Error = answeredByServer ? error : ConnectionEnded(sent: true, cause: error)
        for promise in failed.values { promise.fail(answer) }
    }
}
