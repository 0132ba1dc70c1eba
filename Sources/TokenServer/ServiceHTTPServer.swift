import Foundation
import Logging
import Metrics
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import NIOSSL
import PeerCA
import ServiceLifecycle
import Synchronization

/// The HTTP/1.1 server `tokentool serve` runs: SwiftNIO's HTTP codec, and one channel handler that
/// reads each request whole on its connection's event loop, answers it from ``ServiceEndpoints``
/// in one task, and writes the answer back on the loop.
///
/// The request's task runs on the connection's event loop too (``LoopTaskExecutor``; the tasks it
/// starts for the request — its deadline's work, the ledger's batch writer — follow through
/// `RequestExecutor`): a certificate's crypto is ≈ 100 µs of CPU, and handing each request to
/// Swift's global pool and its answer back cost two thread hand-offs and their wake-ups a request,
/// and, with the pool idle, a ledger transaction for every two or three certificates. On the loop,
/// the loops (one per core) do the work between reads, and the ledger's transactions take what
/// the loop has computed since the last (≈ 10 certificates under 32 connections instead of 8.3).
/// Nothing on a request's path blocks its thread (the ledgers, key fetches and TLS are
/// asynchronous). `TOKENTOOL_WORK_ON_LOOPS=0` runs the tasks on the global pool as before, for a
/// comparison (README, "Issuance").
///
/// Why not Hummingbird's server, which the service used before (and whose router
/// ``TokenHTTPServer/router(_:metrics:)`` still offers for embedding): its connections are async
/// sequences, so every request is handed from the event loop to the connection's task and every
/// response part back, through `NIOAsyncChannel`'s buffers. Under 32 connections of certificate
/// requests on two cores that machinery cost ≈ 25 µs of CPU a request, an eighth of the request
/// (alternated pairs on one binary; see README, "Issuance", and `docs/issuance-log.md`).
///
/// What it keeps from the framework: NIO's request decoder (llhttp), keep-alive and pipelined
/// requests answered in order (the handler holds the next request, and stops reading, until the
/// answer before it is written: what `HTTPServerPipelineHandler` did, without unregistering the
/// socket's reads for every request), nothing read after `Connection: close`, 400 and a close on a
/// malformed request (our own: NIO's error handler would also answer bytes after a closing
/// request), the decoder's header limits, a connection closed when it has been silent for
/// `idleTimeout` outside an answer (also one stalled in the middle of a request), an answer for a
/// client that half-closes after its request, HTTPS (with the client's certificate, optional, for
/// renewal), a `Date` header, and a graceful shutdown that stops accepting, closes idle
/// connections, lets requests in flight finish and waits for their work.
final class ServiceHTTPServer: Service {
    private let endpoints: ServiceEndpoints
    private let host: String
    private let port: Int
    private let tls: NIOSSLContext?
    private let idleTimeout: TimeAmount
    private let workOnLoops: Bool
    private let maxConnections: Int
    private let logger: Logger
    private let beforeStart: @Sendable () async throws -> Void
    private let onRunning: @Sendable (Int) async -> Void

    /// - Parameter workOnLoops: Run requests' work on their connections' event loops (see the
    ///   type's documentation; endpoints marked otherwise stay on the global pool); by default
    ///   yes, unless `TOKENTOOL_WORK_ON_LOOPS=0`.
    init(
        endpoints: ServiceEndpoints, host: String, port: Int, tls: NIOSSLContext?, idleTimeout: TimeAmount,
        workOnLoops: Bool = LoopTaskExecutor.workOnLoops, maxConnections: Int = .max, logger: Logger,
        beforeStart: @escaping @Sendable () async throws -> Void, onRunning: @escaping @Sendable (Int) async -> Void
    ) {
        self.workOnLoops = workOnLoops
        self.maxConnections = maxConnections
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
    /// every connection has closed and every request's work has ended. A connection that stalls
    /// is closed within `idleTimeout`, and work with a deadline ends by it, so the wait is
    /// bounded. A bind failure is thrown as NIO's `IOError` (its errno says why: `EADDRINUSE`,
    /// `EACCES`, `EADDRNOTAVAIL`).
    func run() async throws {
        try await beforeStart()
        let group = MultiThreadedEventLoopGroup.singleton
        let quiesce = ServerQuiescingHelper(group: group)
        let work = InFlightWork()
        let endpoints = self.endpoints, tls = self.tls, idleTimeout = self.idleTimeout, logger = self.logger, workOnLoops = self.workOnLoops, maxConnections = self.maxConnections
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldCount = 1000  // Hummingbird's limit; NIO's own allows 65,534
        let decoderLimits = limits
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(AcceptControl(limit: maxConnections, logger: logger))
                    try channel.pipeline.syncOperations.addHandler(quiesce.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    if let tls { try pipeline.addHandler(NIOSSLServerHandler(context: tls)) }
                    // NIO's request decoder (llhttp) alone: the handler orders pipelined requests
                    // and writes each answer as one buffer itself (ServiceRequestHandler).
                    try pipeline.addHandler(ByteToMessageHandler(HTTPRequestDecoder(
                        leftOverBytesStrategy: .dropBytes, informationalResponseStrategy: .drop, limitConfiguration: decoderLimits)))
                    try pipeline.addHandler(ServiceRequestHandler(
                            endpoints: endpoints, work: work, idleTimeout: idleTimeout,
                            executor: workOnLoops ? LoopTaskExecutor(channel.eventLoop) : nil, logger: logger))
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
        // A request whose client went away may still be running: the ledger outlives it.
        await work.finished()
        logger.info("HTTP server stopped", metadata: ["port": "\(bound)"])
    }
}

/// Decides when the listening socket is read (accepts), in one place: not while `limit`
/// connections are open (`limits.maxConnections`), and not for a second after accepting failed
/// (out of file descriptors, say). Each stop is said once.
///
/// The cap: new connections wait in the kernel's accept queue (then their SYNs go unanswered and
/// the client retries) rather than taking the file descriptors the ledger, key fetches and logs
/// need; accepting resumes when one closes. One accept batch (NIO reads up to a few connections at
/// a time) may go past the limit by those few.
///
/// The pause: a failed accept leaves the listening socket readable, so without it the loop retried
/// ≈ 8,000 times a second, silently; NIO's `AcceptBackoffHandler` holds back the reads it is asked
/// for, but after a failed accept the socket stays registered for reading, and only turning
/// `autoRead` off unregisters it.
final class AcceptControl: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = Channel
    typealias InboundOut = Channel

    static let pause = TimeAmount.seconds(1)
    private let limit: Int
    private let logger: Logger
    private var open = 0
    /// The end of an accept-error pause (nil: not pausing).
    private var resume: Scheduled<Void>?

    init(limit: Int, logger: Logger) {
        self.limit = max(1, limit)
        self.logger = logger
    }

    /// Accepts go on unless at the cap or pausing after an error.
    private func updateReading(_ server: any Channel) {
        _ = try? server.syncOptions?.setOption(.autoRead, value: open < limit && resume == nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop), server = context.channel, loop = context.eventLoop
        unwrapInboundIn(data).closeFuture.whenComplete { _ in
            loop.execute {
                handler.value.open -= 1
                if handler.value.open == handler.value.limit - 1 { handler.value.updateReading(server) }
            }
        }
        open += 1
        if open == limit {
            logger.warning("connection limit reached; accepting again when one closes", metadata: ["open": "\(open)", "limit": "\(limit)"])
            updateReading(server)
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard error is IOError, context.channel.isActive else { return context.fireErrorCaught(error) }
        guard resume == nil else { return }  // paused already
        logger.warning("cannot accept connections; pausing accepts for 1 s", metadata: ["error": "\(error)"])
        let server = context.channel
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        resume = context.eventLoop.scheduleTask(in: Self.pause) {
            handler.value.resume = nil
            handler.value.updateReading(server)
        }
        updateReading(server)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        resume?.cancel()
        resume = nil
    }
}

/// The endpoints' work running now, so that the server returns only when it has ended.
final class InFlightWork: Sendable {
    private struct State {
        var running = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    func started() { state.withLock { $0.running += 1 } }

    func ended() {
        let waiting = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.running -= 1
            guard state.running == 0 else { return [] }
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Returns when no work is running.
    func finished() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.running == 0 { return true }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }
}

/// One connection's requests: each read whole (its body up to the endpoints' limit), answered by
/// its endpoint in a task, the answer written on the connection's event loop as one buffer
/// (``HTTPAnswer``). A request that arrives while one is answered (pipelined) is held, with
/// whatever follows it, and the connection is not read further until the answer is written; then
/// the held requests are taken in order, so answers go out in the order the requests came.
final class ServiceRequestHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// What arrived while a request was being answered, kept for after its answer, in order.
    private enum Held {
        case part(HTTPServerRequestPart)
        /// The client half-closed after the requests held before it.
        case inputClosed
        /// The decoder found bytes that are not HTTP/1.1 after the requests held before it.
        case malformed(any Error)
    }

    private let endpoints: ServiceEndpoints
    private let work: InFlightWork
    private let logger: Logger
    /// Silence closes the connection after this long outside an answer. It is counted from the
    /// last HTTP part read or answer written (after the codec: a head sent a byte at a time is
    /// silence too), by one timer per connection that, when it fires early, waits out the rest.
    /// NIO's `IdleStateHandler` did the same at ≈ 6 µs a request (a promise and a callback for
    /// every part written).
    private let idleTimeout: TimeAmount
    private var lastActivity = NIODeadline.now()
    private var partsRead = false
    private var idleTimer: Scheduled<Void>?
    /// The connection's context while the handler is in its pipeline (nil once removed: an answer
    /// that comes after the connection closed is dropped).
    private var context: ChannelHandlerContext?
    /// The request being read: its head, its path and the endpoint that serves it, its body.
    private var head: HTTPRequestHead?
    private var endpoint: ServiceEndpoint?
    private var path = ""
    private var body = ByteBuffer()
    /// The body's bytes once it is over the limit (read and dropped; it is answered 413); past
    /// ``drainLimit`` the connection is closed. 0 while the body is within the limit.
    private var excess = 0
    /// A request has been read whole and its answer is not yet written.
    private var answering = false
    /// When the request being read began (its head): head and body must arrive within
    /// ``readTimeout`` of it, however steadily they trickle (a byte a second kept a connection
    /// that silence would have closed open without end).
    private var readingSince: NIODeadline?
    /// What the request being read is answered instead of its endpoint (a second Authorization
    /// header, no Host), decided from its head; the body is read first.
    private var refusal: ServiceResponse?
    /// The request being answered is a HEAD: its GET endpoint's answer, without the body.
    private var headOnly = false
    /// The `Allow` header of a 405 being answered.
    private var allow: String?
    /// How long a request's head and body may take to arrive: three idle timeouts.
    private var readTimeout: TimeAmount { idleTimeout * 3 }
    /// Nothing more is read on this connection (`Connection: close`, the client half-closed, an
    /// error): it closes once the answer being made, if any, is written.
    private var closing = false
    /// Pipelined requests (and events) that came while a request was answered: replayed one
    /// request at a time once its answer is written. While any are held, nothing more is read
    /// (`readHeld`), so a client that pipelines cannot make the server buffer more than one read.
    private var held = CircularBuffer<Held>()
    /// A `read` the pipeline asked for while requests were held, passed on once they are answered.
    private var readHeld = false
    /// The server is shutting down gracefully: the request being read or answered is the
    /// connection's last (its answer says `Connection: close`).
    private var quiescing = false

    /// How much of a body over the limit is read (and dropped) so that the connection can answer
    /// 413 and stay usable; a longer one is answered 413 at once and the connection closed.
    private var drainLimit: Int { max(endpoints.maxBody * 4, 1 << 20) }

    /// The connection's event loop as the executor of its requests' tasks (nil: the global pool).
    private let executor: LoopTaskExecutor?

    init(endpoints: ServiceEndpoints, work: InFlightWork, idleTimeout: TimeAmount, executor: LoopTaskExecutor?, logger: Logger) {
        self.endpoints = endpoints
        self.work = work
        self.idleTimeout = idleTimeout
        self.executor = executor
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive { armIdleTimer(context, in: idleTimeout) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        idleTimer?.cancel()
        idleTimer = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        lastActivity = .now()
        if idleTimer == nil { armIdleTimer(context, in: idleTimeout) }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        idleTimer?.cancel()
        idleTimer = nil
        context.fireChannelInactive()
    }

    private func armIdleTimer(_ context: ChannelHandlerContext, in delay: TimeAmount) {
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        idleTimer = context.eventLoop.scheduleTask(in: delay) { handler.value.idleTimerFired() }
    }

    /// Closes a connection silent for the idle timeout outside an answer (also a closing one: a
    /// last answer the client does not read must not hold the channel); otherwise waits again.
    private func idleTimerFired() {
        guard let context else { return }
        let now = NIODeadline.now()
        let silent = now - lastActivity
        if !answering && silent >= idleTimeout {
            idleTimer = nil
            context.close(promise: nil)
            return
        }
        if !answering, !closing, let head, let since = readingSince, now - since >= readTimeout {
            // A request still arriving after the read timeout: 408, and the connection closed.
            idleTimer = nil
            self.head = nil
            readingSince = nil
            closing = true
            let seconds = readTimeout.nanoseconds / 1_000_000_000
            return answerLater(.error(408, "request_timeout", "the request did not arrive whole within \(seconds) s"), version: head.version, keepAlive: false)
        }
        var next = answering ? idleTimeout : idleTimeout - silent
        if !answering, let since = readingSince { next = min(next, readTimeout - (now - since)) }
        armIdleTimer(context, in: max(next, .milliseconds(1)))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if partsRead {
            partsRead = false
            lastActivity = .now()
        }
        context.fireChannelReadComplete()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // What a closing connection is sent is dropped, and is not activity: a client cannot
        // keep it open past the idle timeout by sending.
        guard !closing else { return }
        partsRead = true
        let part = unwrapInboundIn(data)
        // The next request of a pipeline, while one is answered: held until its answer is written.
        if answering || !held.isEmpty { return held.append(.part(part)) }
        read(part, context: context)
    }

    /// Holds the pipeline's reads while requests are held (one read's worth at most is
    /// buffered), while the connection is closing, and while the socket takes no more writes (a
    /// client that sends requests and does not read the answers would make them pile up).
    func read(context: ChannelHandlerContext) {
        if held.isEmpty, !closing, context.channel.isWritable {
            context.read()
        } else {
            readHeld = true
        }
    }

    /// Reads again once the answers written so far have drained, if a read was held for them.
    func channelWritabilityChanged(context: ChannelHandlerContext) {
        resumeReading(context)
        context.fireChannelWritabilityChanged()
    }

    /// Passes on a held read, unless something still holds it.
    private func resumeReading(_ context: ChannelHandlerContext) {
        guard readHeld, held.isEmpty, !closing, context.channel.isWritable else { return }
        readHeld = false
        context.read()
    }

    /// Replays held requests, after an answer is written, until one of them is being answered.
    private func replayHeld(_ context: ChannelHandlerContext) {
        // A write that failed at once (a reset) has closed the channel: nothing held is started.
        guard context.channel.isActive else { return held.removeAll() }
        while !answering, !closing, let next = held.popFirst() {
            switch next {
            case .part(let part): read(part, context: context)
            case .inputClosed: closeWhenAnswered(context)
            case .malformed(let error): refuseMalformed(error, context: context)
            }
        }
        if closing { held.removeAll() }
        resumeReading(context)
    }

    private func read(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        switch part {
        case .head(let head):
            self.head = head
            readingSince = .now()
            path = Self.routePath(head.uri)
            // HEAD is GET without the body (RFC 9110 §9.3.2): a load balancer's HEAD /healthz was 404.
            headOnly = head.method == .HEAD
            allow = nil
            let method: ServiceEndpoint.Method? = head.method == .GET || head.method == .HEAD ? .get : head.method == .POST ? .post : nil
            endpoint = method.flatMap { endpoints.endpoint(method: $0, path: path) }
            body.clear()
            excess = 0
            refusal = Self.refusal(of: head)
            // A transfer coding other than chunked alone is not read (RFC 9112 §6.1: 501); read
            // as plain chunked, "gzip, chunked" is how requests are smuggled past a proxy.
            if let codings = Self.unsupportedTransferCoding(head) {
                self.head = nil
                closing = true
                return answerLater(
                    .error(501, "not_implemented", "Transfer-Encoding \(codings.prefix(80)) is not supported; send chunked or a Content-Length"),
                    version: head.version, keepAlive: false)
            }
            if endpoint?.readsBody == true, let declared = head.headers.first(name: "content-length").flatMap(Int.init), declared > drainLimit {
                return refuseBody(head)
            }
            // curl sends `Expect: 100-continue` before a body over 1 KiB and waits a second for it.
            if head.headers.contains(name: "expect") {
                guard head.headers[canonicalForm: "expect"].map({ $0.lowercased() }) == ["100-continue"], head.version == .http1_1 else {
                    self.head = nil
                    closing = true
                    return answerLater(.error(417, "expectation_failed", "only Expect: 100-continue is understood"), version: head.version, keepAlive: false)
                }
                context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(staticString: "HTTP/1.1 100 Continue\r\n\r\n")), promise: nil)
            }
        case .body(var part):
            guard let head, endpoint?.readsBody == true else { return }
            if excess > 0 || body.readableBytes + part.readableBytes > endpoints.maxBody {
                excess += body.readableBytes + part.readableBytes
                body.clear()
                if excess > drainLimit { refuseBody(head) }
            } else {
                body.writeBuffer(&part)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            readingSince = nil
            answer(head, context: context)
        }
    }

    /// What a request's head alone makes it refused with, its body read first: no `Host` in
    /// HTTP/1.1 (RFC 9112 §3.2: 400), or more than one `Authorization` (which would one be?).
    static func refusal(of head: HTTPRequestHead) -> ServiceResponse? {
        if head.version == .http1_1, !head.headers.contains(name: "host") {
            return .error(400, "invalid_request", "an HTTP/1.1 request must have a Host header")
        }
        var authorizations = 0
        for (name, _) in head.headers where name.utf8.count == 13 && name.lowercased() == "authorization" { authorizations += 1 }
        if authorizations > 1 {
            return .error(400, "invalid_request", "the request has more than one Authorization header")
        }
        return nil
    }

    /// The request's transfer codings when they are anything but `chunked` alone (in one header
    /// or several); nil when there are none or only that.
    static func unsupportedTransferCoding(_ head: HTTPRequestHead) -> String? {
        guard head.headers.contains(name: "transfer-encoding") else { return nil }
        let codings = head.headers[canonicalForm: "transfer-encoding"].map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        if codings.isEmpty || codings == ["chunked"] { return nil }
        return codings.joined(separator: ", ")
    }

    /// A body too long to read through: 413 now, and the connection closed after it.
    private func refuseBody(_ head: HTTPRequestHead) {
        self.head = nil
        closing = true
        answerLater(endpoints.bodyTooLarge, version: head.version, keepAlive: false)
    }

    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let keepAlive = head.isKeepAlive
        guard let endpoint else {
            let shown = path.count > 200 ? String(path.prefix(200)) + "…" : path
            if let served = endpoints.method(ofPath: path) {
                // The path exists with another method: 405 and the methods it takes (RFC 9110 §15.5.6).
                let allowed = served == .get ? "GET, HEAD" : "POST"
                allow = allowed
                return answerLater(
                    .error(405, "method_not_allowed", "\(head.method.rawValue.prefix(20)) is not allowed on \(shown); it takes \(allowed)"),
                    version: head.version, keepAlive: keepAlive)
            }
            return answerLater(.error(404, "not_found", "no endpoint \(head.method.rawValue) \(shown)"), version: head.version, keepAlive: keepAlive)
        }
        if excess > 0 { return answerLater(endpoints.bodyTooLarge, version: head.version, keepAlive: keepAlive) }
        if let refusal { return answerLater(refusal, version: head.version, keepAlive: keepAlive) }
        let request = ServiceRequest(
            body: Array(body.readableBytesView), authorization: head.headers.first(name: "authorization"),
            contentType: head.headers.first(name: "content-type"), channel: context.channel)
        answering = true
        let loop = context.eventLoop, name = endpoint.name, version = head.version
        let handler = NIOLoopBound(self, eventLoop: loop)
        let work = self.work, executor = endpoint.onLoop ? self.executor : nil
        work.started()
        Task(executorPreference: executor) {
            let response = await RequestExecutor.$current.withValue(executor) { await endpoint.respond(request) }
            work.ended()
            if loop.inEventLoop {
                handler.value.write(response, name: name, version: version, keepAlive: keepAlive)
            } else {
                loop.execute { handler.value.write(response, name: name, version: version, keepAlive: keepAlive) }
            }
        }
    }

    /// An answer made on the loop, written in the loop's next turn: a pipelined run of such
    /// requests is then answered one turn each, not one stack frame deeper each (the pipelining
    /// handler passes the next request on from inside the previous answer's write).
    private func answerLater(_ response: ServiceResponse, version: HTTPVersion, keepAlive: Bool) {
        guard let context else { return }
        answering = true
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop), name = endpoint?.name ?? endpoints.name(ofPath: path)
        context.eventLoop.execute { handler.value.write(response, name: name, version: version, keepAlive: keepAlive) }
    }

    /// The counter of the connection's last answer: a keep-alive connection mostly asks one
    /// endpoint, and its answers mostly have one status (no lookup under the shared lock then).
    private var lastCounter: (name: String, status: Int, counter: Counter)?

    /// Counts an answer of `name`'s endpoint with `status` in `tokenserver_requests_total`.
    private func count(_ name: String, _ status: Int) {
        if let last = lastCounter, last.status == status, last.name == name { return last.counter.increment() }
        let counter = endpoints.counters.counter(endpoint: name, status: status)
        lastCounter = (name, status, counter)
        counter.increment()
    }

    /// Writes the answer — status line, headers and body in one buffer, one `writev` — and then
    /// goes on with the requests held meanwhile, or closes.
    private func write(_ response: ServiceResponse, name: String, version: HTTPVersion, keepAlive: Bool) {
        answering = false
        lastActivity = .now()
        count(name, response.status)
        guard let context else { return }
        let close = !keepAlive || closing || quiescing
        closing = close
        let bytes = HTTPAnswer.encode(
            response, version: version, date: HTTPDate.now(), allow: allow, close: close, withBody: !headOnly,
            allocator: context.channel.allocator)
        allow = nil
        if close {
            held.removeAll()
            Self.close(context, after: bytes)
        } else {
            context.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
            replayHeld(context)
        }
    }

    /// The client's half-closure closes the connection, after the answer being made if there is
    /// one.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event as? ChannelEvent == .inputClosed {
            if held.isEmpty { closeWhenAnswered(context) } else { held.append(.inputClosed) }
            return
        }
        // Graceful shutdown (`ServerQuiescingHelper`): an idle connection closes now; one with a
        // request being read or answered closes after that answer (held requests are dropped).
        if event is ChannelShouldQuiesceEvent {
            quiescing = true
            held.removeAll()
            if !answering, head == nil { closeWhenAnswered(context) }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// An error ends the connection, after the answer being made if there is one: a reset, a TLS
    /// failure (an unclean TLS shutdown after a whole request still gets its answer), or a
    /// malformed request, answered 400 unless the connection was closing anyway (bytes after a
    /// `Connection: close` request are not an error to report). NIO's own protocol-error handler
    /// is not used: it would answer those bytes too.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The decoder's word for bytes after a parse error it has reported already: that error
        // decides (a 400 once the requests held before it are answered).
        if case ByteToMessageDecoderError.dataReceivedInErrorState = error { return }
        logger.debug("HTTP connection error", metadata: ["error": "\(error)"])
        // After the requests held before it: those are answered first.
        if error is HTTPParserError, !closing, answering || !held.isEmpty { return held.append(.malformed(error)) }
        refuseMalformed(error, context: context)
    }

    /// A malformed request (`HTTPParserError`) is answered 400 and the connection closed; any other
    /// error closes it, after the answer being made.
    private func refuseMalformed(_ error: any Error, context: ChannelHandlerContext) {
        if error is HTTPParserError, !closing, !answering {
            head = nil
            headOnly = false  // a HEAD before the bad bytes: the 400 has its body
            closing = true
            endpoint = nil
            path = ""
            return answerLater(.error(400, "invalid_request", "the request is not HTTP/1.1 this server reads"), version: .http1_1, keepAlive: false)
        }
        closeWhenAnswered(context)
    }

    /// Closes now, or once the answer being made is written. Already `closing`, the close is set
    /// to follow the answer's write (an event the pipelining handler passes on from inside that
    /// write must not close the channel before the answer is flushed).
    private func closeWhenAnswered(_ context: ChannelHandlerContext) {
        if closing { return }
        closing = true
        if !answering { Self.close(context, after: context.channel.allocator.buffer(capacity: 0)) }
    }

    /// Writes `bytes` and closes the channel once they, and what was written before them, are
    /// sent: a close at once would cancel the rest of an answer still waiting for the socket (a
    /// large answer to a slow reader).
    static func close(_ context: ChannelHandlerContext, after bytes: ByteBuffer) {
        let channel = context.channel
        context.writeAndFlush(NIOAny(bytes)).whenComplete { _ in channel.close(promise: nil) }
    }

    /// The path a request target names, as routes are matched: without its query, from an
    /// absolute-form target (`http://host/path`) too, and without empty segments (`//v1/ca`,
    /// `/healthz/`), as Hummingbird's router matched them.
    static func routePath(_ target: String) -> String {
        var path = Substring(target)
        if let query = path.utf8.firstIndex(of: UInt8(ascii: "?")) { path = path[..<query] }
        if path.utf8.first != UInt8(ascii: "/"), let scheme = path.range(of: "://") {
            let rest = path[scheme.upperBound...]
            path = rest.firstIndex(of: "/").map { rest[$0...] } ?? "/"
        }
        // Byte by byte (Foundation's `contains` on a string cost ≈ 1.5 µs a request).
        let slash = UInt8(ascii: "/")
        let doubled = zip(path.utf8, path.utf8.dropFirst()).contains { $0 == slash && $1 == slash }
        if doubled || (path.utf8.count > 1 && path.utf8.last == UInt8(ascii: "/")) {
            path = "/" + path.split(separator: "/").joined(separator: "/")
        }
        return String(path)
    }
}

/// An answer's bytes as HTTP/1.1 puts them on the wire: status line, headers, body, in one buffer.
///
/// NIO's `HTTPResponseEncoder` wrote the head and the body as two buffers, after the head had been
/// built as `HTTPHeaders` and passed through the pipelining handler and the header validator;
/// here the headers are the server's own (none comes from a request, so none can carry a line
/// break), and writing them straight into the answer's buffer saves those steps.
enum HTTPAnswer {
    static func encode(
        _ response: ServiceResponse, version: HTTPVersion, date: String, allow: String?, close: Bool, withBody: Bool,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        let status = HTTPResponseStatus(statusCode: response.status)
        var buffer = allocator.buffer(capacity: 192 + response.contentType.utf8.count + (withBody ? response.body.count : 0))
        buffer.writeString("HTTP/\(version.major).\(version.minor) \(response.status) \(status.reasonPhrase)\r\nContent-Type: ")
        buffer.writeString(response.contentType)
        buffer.writeString("\r\nContent-Length: \(response.body.count)\r\nCache-Control: no-store\r\nDate: ")
        buffer.writeString(date)
        buffer.writeStaticString("\r\nServer: tokentool\r\n")
        if let allow { buffer.writeString("Allow: \(allow)\r\n") }
        if close {
            buffer.writeStaticString("Connection: close\r\n")
        } else if version == .http1_0 {
            buffer.writeStaticString("Connection: keep-alive\r\n")
        }
        buffer.writeStaticString("\r\n")
        if withBody { buffer.writeBytes(response.body) }
        return buffer
    }
}

/// The `Date` header's value (RFC 9110's IMF-fixdate), made once a second.
enum HTTPDate {
    private static let cache = Mutex<(second: Int, text: String)>((-1, ""))
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func now() -> String {
        let second = time(nil)
        return cache.withLock { cache in
            if cache.second != second {
                cache = (second, format(second))
            }
            return cache.text
        }
    }

    static func format(_ second: Int) -> String {
        var time = time_t(second)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}

/// An event loop as a task executor: a task that prefers it runs its jobs on the loop's thread,
/// between the loop's I/O, in the order they are enqueued.
///
/// The loop must outlive the tasks (the server's loops are NIO's process-wide singleton group,
/// never shut down): a job enqueued on a loop that has shut down would never run. It must be a
/// loop that runs by itself (not NIO's `EmbeddedEventLoop`, which runs jobs only when a test
/// advances it).
final class LoopTaskExecutor: TaskExecutor {
    /// Whether `tokentool serve` runs request tasks on their connections' loops: yes, unless
    /// `TOKENTOOL_WORK_ON_LOOPS=0` (a comparison with the global pool).
    static let workOnLoops = ProcessInfo.processInfo.environment["TOKENTOOL_WORK_ON_LOOPS"] != "0"

    let loop: any EventLoop

    init(_ loop: any EventLoop) { self.loop = loop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        loop.execute { job.runSynchronously(on: executor) }
    }
}
