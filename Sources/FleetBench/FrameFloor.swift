import ArgumentParser
import DispatcherProtocol
import FleetSupport
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
        write(#"{"type":"greeting","protocol":"wearbloom-dispatcher","version":1,"authRequired":true,"maxFrameBytes":1048576,"ops":[]}"#, context)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let id = frame.readableBytesView.withContiguousStorageIfAvailable(Self.requestID) ?? "null"
        write(#"{"id":\#(id),"ok":true,"result":{"isNew":true,"jobId":\#(id),"kind":"drill.noop"}}"#, context)
    }

    private static func requestID(_ bytes: UnsafeBufferPointer<UInt8>) -> Substring {
        guard bytes.count >= idKey.count,
              let start = (0...(bytes.count - idKey.count)).first(where: { at in idKey.indices.allSatisfy { bytes[at + $0] == idKey[$0] } })
        else { return "null" }
        let digits = bytes[(start + idKey.count)...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        return digits.isEmpty ? "null" : Substring(String(decoding: digits, as: UTF8.self))
    }

    private func write(_ text: String, _ context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: text.utf8.count + 1)
        buffer.writeString(text)
        buffer.writeInteger(UInt8(ascii: "\n"))
        context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
    }
}
