import Logging
import Metrics
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import NIOSSL
import ServiceLifecycle

/// The HTTP/1.1 server `tokentool serve` runs: SwiftNIO's HTTP codec, and one channel handler that
/// reads each request whole on its connection's event loop, answers it from ``ServiceEndpoints``
/// in one task, and writes the answer back on the loop.
///
/// Why not Hummingbird's server, which the service used before (and whose router
/// ``TokenHTTPServer/router(_:metrics:)`` still offers for embedding): its connections are async
/// sequences, so every request is handed from the event loop to the connection's task and every
/// response part back, through `NIOAsyncChannel`'s buffers. Under 32 connections of certificate
/// requests on two cores that machinery cost ≈ 60 µs of CPU a request, a third of the request
/// (`scripts/issuance_load.sh`: 7,777 against 10,622 requests/s on the same host in the same
/// hour; see README, "Issuance", and `docs/issuance-log.md`).
///
/// What it keeps from the framework: keep-alive and pipelined requests answered in order
/// (`HTTPServerPipelineHandler`), 400 and a close on a malformed request, an idle connection
/// closed after `idleTimeout`, HTTPS (with the client's certificate, optional, for renewal), and a
/// graceful shutdown that stops accepting, closes idle connections and lets requests in flight
/// finish (`ServerQuiescingHelper`).
final class ServiceHTTPServer: Service {
    private let endpoints: ServiceEndpoints
    private let host: String
    private let port: Int
    private let tls: NIOSSLContext?
    private let idleTimeout: TimeAmount
    private let logger: Logger
    private let beforeStart: @Sendable () async throws -> Void
    private let onRunning: @Sendable (Int) async -> Void

    init(
        endpoints: ServiceEndpoints, host: String, port: Int, tls: NIOSSLContext?, idleTimeout: TimeAmount, logger: Logger,
        beforeStart: @escaping @Sendable () async throws -> Void, onRunning: @escaping @Sendable (Int) async -> Void
    ) {
        self.logger = logger
        self.endpoints = endpoints
        self.host = host
        self.port = port
        self.tls = tls
        self.idleTimeout = idleTimeout
        self.beforeStart = beforeStart
        self.onRunning = onRunning
    }

    /// Listens until graceful shutdown (or cancellation), then stops accepting and returns once
    /// every connection has closed. A bind failure is thrown as NIO's `IOError` (its errno says
    /// why: `EADDRINUSE`, `EACCES`, `EADDRNOTAVAIL`).
    func run() async throws {
        try await beforeStart()
        let group = MultiThreadedEventLoopGroup.singleton
        let quiesce = ServerQuiescingHelper(group: group)
        let endpoints = self.endpoints, tls = self.tls, idleTimeout = self.idleTimeout
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiesce.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if let tls { try pipeline.addHandler(NIOSSLServerHandler(context: tls)) }
                    try pipeline.addHandler(IdleStateHandler(readTimeout: idleTimeout))
                    try pipeline.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
                    try pipeline.addHandler(ServiceRequestHandler(endpoints: endpoints))
                }
            }
        let listener = try await bootstrap.bind(host: host, port: port).get()
        let bound = listener.localAddress?.port ?? port
        logger.info("HTTP server listening", metadata: ["host": "\(host)", "port": "\(bound)", "tls": "\(tls != nil)"])
        await onRunning(bound)
        // Until graceful shutdown is triggered; cancellation (another service of the group failed)
        // ends the wait too, and the shutdown below is the same.
        try? await gracefulShutdown()
        let closed = group.next().makePromise(of: Void.self)
        quiesce.initiateShutdown(promise: closed)
        try await closed.futureResult.get()
        logger.info("HTTP server stopped", metadata: ["port": "\(bound)"])
    }
}

/// One connection's requests: each read whole (its body up to the endpoints' limit), answered by
/// its endpoint in a task, the answer written on the connection's event loop. While a request is
/// answered, `HTTPServerPipelineHandler` holds the next one back, so answers go out in order.
final class ServiceRequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let endpoints: ServiceEndpoints
    /// The connection's context while the handler is in its pipeline (nil once removed: an answer
    /// that comes after the connection closed is dropped).
    private var context: ChannelHandlerContext?
    /// The request being read: its head, the endpoint and counter name of its path, its body.
    private var head: HTTPRequestHead?
    private var endpoint: ServiceEndpoint?
    private var path = ""
    private var body = ByteBuffer()
    private var bodyTooLarge = false
    /// A request has been read whole and its answer is not yet written.
    private var answering = false

    init(endpoints: ServiceEndpoints) { self.endpoints = endpoints }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            let target = head.uri
            path = String(target[..<(target.firstIndex(of: "?") ?? target.endIndex)])
            let method: ServiceEndpoint.Method? = head.method == .GET ? .get : head.method == .POST ? .post : nil
            endpoint = method.flatMap { endpoints.endpoint(method: $0, path: path) }
            body.clear()
            bodyTooLarge = false
        case .body(var part):
            guard endpoint?.readsBody == true, !bodyTooLarge else { return }
            if body.readableBytes + part.readableBytes > endpoints.maxBody {
                bodyTooLarge = true
                body.clear()
            } else {
                body.writeBuffer(&part)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            answer(head, context: context)
        }
    }

    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let keepAlive = head.isKeepAlive, name = endpoints.name(ofPath: path)
        guard let endpoint else {
            return write(.error(404, "not_found", "no endpoint \(head.method) \(path)"), name: name, keepAlive: keepAlive)
        }
        if bodyTooLarge { return write(endpoints.bodyTooLarge, name: name, keepAlive: keepAlive) }
        let request = ServiceRequest(
            body: Array(body.readableBytesView), authorization: head.headers.first(name: "authorization"),
            contentType: head.headers.first(name: "content-type"), channel: context.channel)
        answering = true
        let loop = context.eventLoop
        let handler = NIOLoopBound(self, eventLoop: loop)
        Task {
            let response = await endpoint.respond(request)
            loop.execute { handler.value.write(response, name: name, keepAlive: keepAlive) }
        }
    }

    private func write(_ response: ServiceResponse, name: String, keepAlive: Bool) {
        answering = false
        endpoints.counters.counter(endpoint: name, status: response.status).increment()
        guard let context else { return }
        var headers = HTTPHeaders()
        headers.reserveCapacity(5)
        headers.add(name: "Content-Type", value: response.contentType)
        headers.add(name: "Content-Length", value: String(response.body.count))
        headers.add(name: "Cache-Control", value: "no-store")
        headers.add(name: "Server", value: "tokentool")
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let status = HTTPResponseStatus(statusCode: response.status)
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if !response.body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        }
        if keepAlive {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        } else {
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// Closes a connection that read nothing for the idle timeout, unless it waits for an answer.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            if !answering && head == nil { context.close(promise: nil) }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// An error ends the connection: a reset, a TLS failure, or a malformed request (which
    /// `HTTPServerProtocolErrorHandler`, before this handler, has answered 400 and flushed).
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

