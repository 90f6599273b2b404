import ArgumentParser
import DispatcherProtocol
import Foundation
import NIOCore
import NIOPosix

/// `fleet-bench frame-floor`: the least a server on this machine spends answering one framed
/// request. A bare SwiftNIO server with the dispatcher's framing (`FrameReader`) and event
/// loops answers every frame at once with an enqueue's answer of the same size, copying the
/// request's id: no parse, no route, no database. `enqueue-cost --floor` measures it as it
/// measures the dispatcher, so the dispatcher's CPU per enqueue is read against what the
/// socket, the kernel and NIO alone take.
struct FrameFloor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "frame-floor",
        abstract: "A bare NIO server answering each frame at once (the floor enqueue-cost --floor measures).",
        shouldDisplay: false)

    @Option(help: "The TCP port on 127.0.0.1.") var port: Int

    func run() async throws {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(FrameReader(maxFrameBytes: WireFormat.defaultMaxFrameBytes))
                    try channel.pipeline.syncOperations.addHandler(FloorAnswerer())
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        try await channel.closeFuture.get()
    }
}

/// Greets, then answers each frame with `{"id":ID,"ok":true,"result":{…}}`, ID copied from the
/// frame's `"id":` digits.
private final class FloorAnswerer: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private static let idKey = Array(#""id":"#.utf8)

    func channelActive(context: ChannelHandlerContext) {
        let greeting = Greeting(authRequired: true, maxFrameBytes: WireFormat.defaultMaxFrameBytes, ops: [])
        if let frame = try? WireFormat.frame(greeting, encoder: WireFormat.makeEncoder()) {
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let id = frame.readableBytesView.withContiguousStorageIfAvailable(Self.requestID) ?? "null"
        let answer = #"{"id":\#(id),"ok":true,"result":{"isNew":true,"jobId":\#(id),"kind":"drill.noop"}}"#
        context.writeAndFlush(wrapOutboundOut(lineFrame(answer, allocator: context.channel.allocator)), promise: nil)
    }

    private static func requestID(_ bytes: UnsafeBufferPointer<UInt8>) -> Substring {
        guard let start = firstOffset(of: idKey, in: bytes) else { return "null" }
        let digits = bytes[(start + idKey.count)...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        return digits.isEmpty ? "null" : Substring(String(decoding: digits, as: UTF8.self))
    }
}
