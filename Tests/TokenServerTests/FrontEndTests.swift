import Foundation
import Hummingbird
import Logging
import MetricsTestKit
import NIOCore
import PeerCA
import ServiceLifecycle
import Synchronization
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The server `tokentool serve` runs — TokenServer's Hummingbird application, the same a program
/// embeds — at the level of bytes on a socket: what HTTP/1.1 clients rely on that the endpoint
/// tests (through AsyncHTTPClient) do not show.
@Suite("The service's HTTP/1.1 server")
struct FrontEndTests {
    /// ``LiveServer/with(configure:serving:_:)`` with the application alone (no ledger services
    /// beside it), its requests counted in `counted`, connections idle for `idle` seconds closed
    /// (and bodies still arriving after three times that answered 408), at most `maxConnections`
    /// open; `body` gets its port (the OS picked it).
    static func withServer<T: Sendable>(
        counted: TestMetrics = TestMetrics(), idle: Int64 = 60, maxConnections: Int? = nil, _ body: @Sendable (UInt16) async throws -> T
    ) async throws -> T {
        try await LiveServer.with(configure: { configuration in
            if let maxConnections {
                var limits = configuration.limits ?? ServerConfiguration.Limits()
                limits.maxConnections = maxConnections
                configuration.limits = limits
            }
        }, serving: { service, logger, onRunning in
            let server = try Self.server(service, logger: logger, counted: counted, idle: idle, onRunning: onRunning)
            return ServiceGroup(configuration: .init(services: [server], logger: logger))
        }) { server in try await body(server.port) }
    }

    /// The application on 127.0.0.1, a port the OS picks, no TLS, counting its requests in `counted`.
    static func server(
        _ service: TokenService, logger: Logger, counted: TestMetrics = TestMetrics(), idle: Int64 = 60,
        onRunning: @escaping @Sendable (Int) async -> Void
    ) throws -> Application<CountingResponder> {
        var endpoints = ServiceEndpoints(service, metrics: nil, counters: RequestCounters(factory: counted))
        endpoints.readTimeout = .seconds(3 * idle)
        return try TokenHTTPServer.makeApplication(
            service, logger: logger, router: TokenHTTPServer.router(endpoints), idleTimeout: .seconds(idle), onRunning: onRunning)
    }

    /// The responses in `bytes`, in order: status and body of each (by Content-Length).
    static func responses(_ bytes: [UInt8]) -> [(status: Int, headers: String, body: String)] {
        var rest = Substring(String(decoding: bytes, as: UTF8.self))
        var found: [(Int, String, String)] = []
        while let end = rest.range(of: "\r\n\r\n") {
            let head = rest[..<end.lowerBound]
            let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
            let length = head.firstMatch(of: /(?i)content-length: *(\d+)/).flatMap { Int($0.1) } ?? 0
            let bodyStart = end.upperBound
            let bodyEnd = rest.utf8.index(bodyStart, offsetBy: length, limitedBy: rest.utf8.endIndex) ?? rest.endIndex
            found.append((status, String(head), String(rest[bodyStart..<bodyEnd])))
            rest = rest[bodyEnd...]
        }
        return found
    }

    /// Three requests sent in one write (pipelined) are answered in the order they came, each
    /// with its own length; `Connection: close` on the last ends the connection after its answer.
    /// A query string does not change the route; every request is counted once, by endpoint.
    @Test func pipelinedRequestsAreAnsweredInOrder() async throws {
        let counted = TestMetrics()
        try await Self.withServer(counted: counted) { port in
            let requests = "GET /healthz?probe=1 HTTP/1.1\r\nHost: t\r\n\r\n"
                + "GET /v1/ca HTTP/1.1\r\nHost: t\r\n\r\n"
                + "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            let answers = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array(requests.utf8)))
            #expect(answers.map(\.status) == [200, 200, 404])
            #expect(answers.first?.body == "ok\n")
            #expect(answers.dropFirst().first?.body.hasPrefix("-----BEGIN CERTIFICATE-----") == true)
            #expect(answers.last?.body.contains("not_found") == true)
            #expect(answers.allSatisfy { $0.headers.lowercased().contains("cache-control: no-store") && $0.headers.lowercased().contains("server: tokentool") })
            func count(_ endpoint: String, _ status: Int) -> Int64 {
                (try? counted.expectCounter("tokenserver_requests_total", [("endpoint", endpoint), ("status", String(status))]))?.totalValue ?? 0
            }
            #expect(count("healthz", 200) == 1)
            #expect(count("ca", 200) == 1)
            #expect(count("unknown", 404) == 1)
        }
    }

    /// A body over `limits.maxBodyBytes` is answered 413 `body_too_large` before it is read, and
    /// the connection closed; one sent chunked that grows past the limit is 413 too. A method an
    /// endpoint does not take is 405 with the methods it does in `Allow`, counted under that
    /// endpoint; HEAD is GET without the body (a load balancer's HEAD /healthz was 404).
    @Test func tooLargeBodiesAndWrongMethods() async throws {
        let counted = TestMetrics()
        try await Self.withServer(counted: counted) { port in
            let huge = [UInt8](repeating: 0x20, count: 70_000)
            let declared = Array("POST /v1/auth HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: \(huge.count)\r\n\r\n".utf8) + huge
            let refused = Self.responses(try await LoopbackSocket.exchange(port: port, sending: declared, seconds: 30))
            #expect(refused.map(\.status) == [413], "\(refused)")
            #expect(refused.first?.body.contains("body_too_large") == true)
            #expect(refused.first?.headers.lowercased().contains("connection: close") == true)
            var chunked = Array("POST /v1/auth HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
            for _ in 0..<9 { chunked += Array("2000\r\n".utf8) + [UInt8](repeating: 0x20, count: 0x2000) + Array("\r\n".utf8) }
            chunked += Array("0\r\n\r\n".utf8)
            let grown = Self.responses(try await LoopbackSocket.exchange(port: port, sending: chunked, seconds: 30))
            #expect(grown.map(\.status) == [413], "\(grown)")

            let requests = Array("GET /v1/auth HTTP/1.1\r\nHost: t\r\n\r\nPOST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n".utf8)
                + Array("HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".utf8)
            let bytes = try await LoopbackSocket.exchange(port: port, sending: requests)
            // HEAD's answer has a length and no body: parse it as a head alone, then the GET after it.
            let text = String(decoding: bytes, as: UTF8.self)
            let headAnswer = try #require(text.range(of: "HTTP/1.1 200 OK"))
            let rest = String(text[headAnswer.lowerBound...])
            let headEnd = try #require(rest.range(of: "\r\n\r\n"))
            #expect(rest[..<headEnd.lowerBound].lowercased().contains("content-length: 3"), "\(rest)")
            #expect(rest[headEnd.upperBound...].hasPrefix("HTTP/1.1 200 OK"), "no body after HEAD's head, the GET's answer next: \(rest)")
            let answers = Self.responses(Array(text[..<headAnswer.lowerBound].utf8)) + Self.responses(Array(rest[headEnd.upperBound...].utf8))
            #expect(answers.map(\.status) == [405, 405, 200])
            #expect(answers[0].headers.lowercased().contains("allow: post") && answers[1].headers.lowercased().contains("allow: get, head"), "\(answers)")
            #expect(answers[0].body.contains("method_not_allowed"))
            let auth405 = (try? counted.expectCounter("tokenserver_requests_total", [("endpoint", "auth"), ("status", "405")]))?.totalValue
            #expect(auth405 == 1)
        }
    }

    /// What is not HTTP is answered 400 and the connection closed (not left open until the
    /// client gives up or the idle timeout).
    @Test func malformedRequestsAreRefused() async throws {
        try await Self.withServer { port in
            // The idle timeout is 60 s, so a close within the 30-s wait is the 400's.
            let (reply, closed) = try await LoopbackSocket.exchangeToClose(port: port, sending: Array("NOT HTTP AT ALL\r\n\r\n".utf8), seconds: 30)
            #expect(String(decoding: reply, as: UTF8.self).hasPrefix("HTTP/1.1 400"), "\(String(decoding: reply.prefix(200), as: UTF8.self))")
            #expect(closed, "the connection stayed open after the 400")
        }
    }

    /// A HEAD, then bytes that are not HTTP: the HEAD's head alone, then a 400, then the close.
    @Test func aHeadThenBadBytesGetsA400() async throws {
        try await Self.withServer { port in
            let sent = Array("HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nNOT HTTP AT ALL\r\n\r\n".utf8)
            let text = String(decoding: try await LoopbackSocket.exchange(port: port, sending: sent, seconds: 30), as: UTF8.self)
            #expect(text.hasPrefix("HTTP/1.1 200 OK"), "\(text)")
            #expect(text.contains("HTTP/1.1 400"), "\(text)")
        }
    }

    /// A connection that sends nothing is closed after the idle timeout (here 1 s), not held open.
    @Test func idleConnectionsAreClosed() async throws {
        try await Self.withServer(idle: 1) { port in
            let start = ContinuousClock.now
            let (reply, closed) = try await LoopbackSocket.exchangeToClose(port: port, sending: [], seconds: 60)
            let waited = ContinuousClock.now - start
            #expect(reply.isEmpty)
            #expect(closed, "an idle connection was held open")
            // Not at once: a lower bound, which a busy machine cannot break.
            #expect(waited >= .milliseconds(900), "closed after \(waited)")
        }
    }

    /// A client that sends its request and shuts down its sending side gets the answer, and the
    /// connection's end at once (not after the idle timeout, here 60 s).
    @Test func aHalfClosedClientGetsItsAnswerAndTheEnd() async throws {
        try await Self.withServer { port in
            let start = ContinuousClock.now
            let bytes = try await LoopbackSocket.exchange(port: port, sending: Array("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8), halfClose: true, seconds: 30)
            let waited = ContinuousClock.now - start
            #expect(Self.responses(bytes).map(\.status) == [200])
            #expect(waited < .seconds(20), "the connection stayed open \(waited) after the answer")
        }
    }

    /// Requests pipelined and then a half-close: every one is answered, in order, before the
    /// connection ends (the half-close waits behind the requests held while the first is answered).
    @Test func pipelinedRequestsAndAHalfCloseAreAllAnswered() async throws {
        try await Self.withServer { port in
            let requests = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /v1/nowhere HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
            let bytes = try await LoopbackSocket.exchange(port: port, sending: Array(requests.utf8), halfClose: true, seconds: 30)
            #expect(Self.responses(bytes).map(\.status) == [200, 404, 200], "\(String(decoding: bytes, as: UTF8.self))")
        }
    }

    /// A graceful shutdown closes a kept-alive connection between requests, not after the idle
    /// timeout (10 minutes here: a shutdown that waited for it would pass the test's time limit),
    /// and the request it had made was answered first.
    @Test(.timeLimit(.minutes(3))) func shutdownClosesKeptAliveConnections() async throws {
        // The time limit is the check that the shutdown did not wait out the idle timeout; what is
        // asserted is that the answer came first and the server then closed the connection.
        let socket = try await Self.withServer(idle: 600) { port in
            let socket = try LoopbackSocket(port: port)
            try socket.send(Array("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8))
            // The answer is read before the shutdown starts, so the connection is idle between requests.
            let answer = try await offThePool { socket.receiveResponse(seconds: 30) }
            #expect(Self.responses(answer).map(\.status) == [200], "\(String(decoding: answer, as: UTF8.self))")
            return socket
        }
        let closed = try await offThePool { socket.receiveToClose(seconds: 60).closed }
        #expect(closed, "the shutdown closed the kept-alive connection")
    }

    /// A request whose body stops coming is closed after the idle timeout (1 s here; timed from
    /// the request's send, not the server's start-up), and a graceful shutdown does not wait for
    /// one without end.
    @Test(.timeLimit(.minutes(2))) func aStalledRequestIsClosed() async throws {
        let stalled = Array("POST /v1/auth HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{".utf8)
        let (held, shutdownStart) = try await Self.withServer(idle: 1) { port in
            let sent = ContinuousClock.now
            // The client would wait 75 s; the server closes after its read timeout (3 s here).
            let reply = try await LoopbackSocket.exchange(port: port, sending: stalled, seconds: 75)
            #expect(reply.isEmpty, "\(String(decoding: reply, as: UTF8.self))")
            #expect(ContinuousClock.now - sent < .seconds(60), "a stalled request held its connection \(ContinuousClock.now - sent)")
            // A second one, still open when the server is asked to stop.
            let socket = try await offThePool {
                let socket = try LoopbackSocket(port: port)
                try socket.send(stalled)
                return socket
            }
            return (socket, ContinuousClock.now)
        }
        #expect(ContinuousClock.now - shutdownStart < .seconds(60), "the shutdown waited for a stalled request")
        _ = held
    }

    /// What clients rely on at the head: `Expect: 100-continue` is answered before the body (curl
    /// waited a second for it before every body over 1 KiB); a transfer coding other than chunked
    /// alone is 501 and the connection closed (read as chunked, "gzip, chunked" is how requests
    /// are smuggled past a proxy); a second Authorization is 400. And a body that trickles in is
    /// answered 408 at three idle timeouts (a byte a second kept the connection open without end;
    /// silence closes it at one).
    @Test(.timeLimit(.minutes(2))) func theHeadIsCheckedAndATricklingBodyEnds() async throws {
        try await Self.withServer(idle: 2) { port in
            let (interim, final) = try await offThePool { () throws -> (String, String) in
                let socket = try LoopbackSocket(port: port)
                let head = "POST /v1/auth HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
                try socket.send(Array(head.utf8))
                // Up to the end of the interim response's head (the server waits for the body meanwhile).
                var interim: [UInt8] = []
                var byte: UInt8 = 0
                var timeout = timeval(tv_sec: 30, tv_usec: 0)
                setsockopt(socket.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                while true {
                    guard recv(socket.fd, &byte, 1, 0) == 1 else { break }
                    interim.append(byte)
                    if interim.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) { break }
                }
                try socket.send(Array("{}".utf8))
                return (String(decoding: interim, as: UTF8.self), String(decoding: socket.receiveAll(seconds: 30), as: UTF8.self))
            }
            #expect(interim.hasPrefix("HTTP/1.1 100 Continue\r\n"), "\(interim)")
            #expect(Self.responses(Array(final.utf8)).count == 1 && !final.hasPrefix("HTTP/1.1 100"), "the answer follows the body: \(final)")

            let smuggled = "POST /v1/auth HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
            let refused = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array(smuggled.utf8)))
            #expect(refused.map(\.status) == [501], "\(refused)")
            #expect(refused.first?.body.contains("transfer coding gzip, chunked is not supported") == true, "\(refused)")
            let twice = "GET /healthz HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\nConnection: close\r\n\r\n"
            let answers = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array(twice.utf8)))
            #expect(answers.map(\.status) == [400], "\(answers)")

            let start = ContinuousClock.now
            let trickled = try await offThePool { () throws -> [UInt8] in
                let socket = try LoopbackSocket(port: port)
                try socket.send(Array("POST /v1/auth HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n".utf8))
                var answer: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                for _ in 0..<40 {
                    usleep(500_000)
                    // Stop sending once the server has answered (a send after its close would be reset).
                    let count = buffer.withUnsafeMutableBytes { recv(socket.fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                    if count > 0 {
                        answer += buffer[..<count]
                        break
                    }
                    guard (try? socket.send([UInt8(ascii: " ")])) != nil else { break }
                }
                return answer + socket.receiveAll(seconds: 5)
            }
            let elapsed = ContinuousClock.now - start
            #expect(Self.responses(trickled).map(\.status) == [408], "\(String(decoding: trickled, as: UTF8.self))")
            #expect(elapsed >= .seconds(5) && elapsed < .seconds(30), "\(elapsed)")
        }
    }

    /// Nothing sent after a request with `Connection: close` is run: one answer, one count.
    @Test func nothingIsReadAfterConnectionClose() async throws {
        let counted = TestMetrics()
        try await Self.withServer(counted: counted) { port in
            let requests = "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
            let answers = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array(requests.utf8)))
            #expect(answers.map(\.status) == [200])
            // The server closed that connection after its first answer (exchange read to the end);
            // one more request on a new connection orders the count: a run second request would
            // make it three.
            let barrier = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".utf8)))
            #expect(barrier.map(\.status) == [200])
            let healthz = (try? counted.expectCounter("tokenserver_requests_total", [("endpoint", "healthz"), ("status", "200")]))?.totalValue
            #expect(healthz == 2)
        }
    }

    /// With `maxConnections` open, the server stops accepting: a third connection to a server
    /// capped at two waits, unanswered, while the first two stay open, and is served once one of
    /// them closes.
    @Test func pastTheConnectionCapNewConnectionsWait() async throws {
        try await Self.withServer(maxConnections: 2) { port in
            let keepAlive = Array("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".utf8)
            let closing = Array("GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".utf8)
            let (first, second) = try await offThePool { () throws -> (LoopbackSocket, LoopbackSocket) in
                let first = try LoopbackSocket(port: port), second = try LoopbackSocket(port: port)
                try first.send(keepAlive)
                try second.send(keepAlive)
                return (first, second)
            }
            // Both accepted and served (an accept batch may go past the cap: the third connects after).
            let answers = try await offThePool { [first.receiveResponse(seconds: 60), second.receiveResponse(seconds: 60)] }
            #expect(answers.allSatisfy { Self.responses($0).first?.status == 200 }, "the first two connections are served")
            let third = try await offThePool { try LoopbackSocket(port: port) }
            let waiting = try await offThePool { () throws -> [UInt8] in
                try third.send(closing)
                return third.receiveAll(seconds: 2)
            }
            #expect(waiting.isEmpty, "a connection past the cap is not served while two are open: \(String(decoding: waiting, as: UTF8.self))")
            first.closeNow()
            let served = try await offThePool { third.receiveAll(seconds: 60) }
            #expect(Self.responses(served).first?.status == 200, "served once a connection closed: \(String(decoding: served, as: UTF8.self))")
            _ = second
        }
    }

    /// Thousands of pipelined requests the handler answers by itself (404s), after one answered
    /// by a task: each is answered, in order, without the stack growing with the run.
    @Test func aLongPipelineOfQuickAnswers() async throws {
        try await Self.withServer { port in
            let count = 3_000
            let requests = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n" + String(repeating: "GET /x HTTP/1.1\r\n\r\n", count: count)
                + "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            let answers = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array(requests.utf8), seconds: 30))
            #expect(answers.count == count + 2)
            #expect(answers.first?.status == 200 && answers.last?.status == 200)
            #expect(answers.dropFirst().dropLast().allSatisfy { $0.status == 404 })
        }
    }

    /// A declared body far over the limit is answered 413 at once and the connection closed,
    /// without reading what the client says it will send.
    @Test func aHugeDeclaredBodyIsRefusedAtOnce() async throws {
        try await Self.withServer { port in
            let start = ContinuousClock.now
            let head = "POST /v1/auth HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{"
            let answers = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array(head.utf8), seconds: 30))
            #expect(answers.map(\.status) == [413])
            #expect(answers.first?.headers.contains("Connection: close") == true)
            #expect(ContinuousClock.now - start < .seconds(20))
        }
    }

    /// Every answer carries a `Date` (RFC 9110's IMF-fixdate).
    @Test func theDateHeader() async throws {
        try await Self.withServer { port in
            let requests = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            let answers = Self.responses(try await LoopbackSocket.exchange(port: port, sending: Array(requests.utf8), seconds: 30))
            #expect(answers.map(\.status) == [200, 404])
            let date = /(?i)date: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT/
            #expect(answers.allSatisfy { $0.headers.contains(date) }, "\(answers)")
        }
    }

    /// A graceful shutdown returns only once every request's work has ended, also the work of a
    /// client that left without its answer: here an SSO call still waiting for
    /// OpenWeb, which answers 3 s after it is asked, so the server cannot return sooner than 3 s
    /// after the request was sent (measured from the send: a test task the pool starves cannot
    /// make that bound fail). Without that wait the server returns at once (no connection is
    /// left), while the call still runs.
    @Test(.timeLimit(.minutes(1))) func shutdownWaitsForTheWorkOfAClientThatLeft() async throws {
        let openweb = try OpenWebServer()
        defer { openweb.stop() }
        try openweb.setMode("slow", delay: 3)
        let section = try openweb.section(timeout: 8)
        let returned = ReturnTime.Instant()
        let sent = try await LiveServer.with(configure: { $0.openweb = section }, serving: { service, logger, onRunning in
            let server = ReturnTime(server: try Self.server(service, logger: logger, onRunning: onRunning), returned: returned)
            return ServiceGroup(configuration: .init(services: [server], logger: logger))
        }) { server in
            let body = Array(JSONValue.object([
                "provider": .string("dev"), "token": .string(try server.token(["name": .string("Ada")])), "codeA": .string(OpenWebTests.codeA),
            ]).compactText.utf8)
            let head = "POST /v1/sso/openweb HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n"
            let sent = ContinuousClock.now
            do {
                let socket = try LoopbackSocket(port: server.port)
                try socket.send(Array(head.utf8) + body)
                let deadline = ContinuousClock.now + .seconds(20)
                while openweb.requests.isEmpty && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
                socket.resetOnClose()
            }  // the socket closes here, by a reset: the client leaves before its answer
            return sent
        }
        #expect(openweb.requests.count == 1)
        let end = try #require(returned.value.withLock { $0 })
        #expect(end - sent >= .milliseconds(2900), "the server returned \(end - sent) after the request was sent, before OpenWeb answered (3 s)")
    }

    /// A server whose `run()` notes when it returned.
    struct ReturnTime: Service {
        final class Instant: Sendable { let value = Mutex<ContinuousClock.Instant?>(nil) }
        let server: Application<CountingResponder>
        let returned: Instant

        func run() async throws {
            try await server.run()
            returned.value.withLock { $0 = .now }
        }
    }

    /// Requests are counted by the path the router matches: no query, no empty segments.
    @Test func routePaths() {
        #expect(ServiceEndpoints.routePath("/healthz?probe=1") == "/healthz")
        #expect(ServiceEndpoints.routePath("//v1//ca/") == "/v1/ca")
        #expect(ServiceEndpoints.routePath("/") == "/")
        #expect(ServiceEndpoints.routePath("/v1/certificates") == "/v1/certificates")
    }
}
