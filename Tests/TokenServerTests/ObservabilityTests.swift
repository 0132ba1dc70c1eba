import Logging
import Metrics
import MetricsTestKit
import Synchronization
import Testing
@testable import TokenServer

/// A stream that keeps what is written to it.
private struct Collected: TextOutputStream, Sendable {
    final class Lines: Sendable {
        let text = Mutex("")
    }
    let lines = Lines()
    func write(_ string: String) { lines.text.withLock { $0 += string } }
    var text: String { lines.text.withLock { $0 } }
}

/// A metadata value that counts how often it is rendered.
private final class RenderCount: CustomStringConvertible, Sendable {
    let count = Mutex(0)
    var description: String {
        count.withLock { $0 += 1 }
        return "req-42"
    }
    var renders: Int { count.withLock { $0 } }
}

private struct Refused: Error, CustomStringConvertible {
    var description: String { "refused" }
}

@Suite struct ServerLogHandlerTests {
    /// The line without its timestamp (the first field, which two handlers may write a second apart).
    private func withoutTimestamps(_ text: String) -> [Substring] {
        text.split(separator: "\n").map { $0.drop(while: { $0 != " " }) }
    }

    @Test func metadataIsFormattedOnlyForAWrittenMessage() {
        let output = Collected()
        var logger = Logger(label: "tokentool.serve") { ServerLogHandler(label: $0, stream: output, metadataProvider: nil) }
        logger.logLevel = .info
        let requestID = RenderCount()
        // What Hummingbird does for every request.
        logger[metadataKey: "hb.request.id"] = .stringConvertible(requestID)
        logger[metadataKey: "endpoint"] = "certificates"
        #expect(requestID.renders == 0)
        logger.debug("below the level")
        #expect(requestID.renders == 0)
        #expect(output.text.isEmpty)

        logger.info("issued", metadata: ["serial": "01ab"])
        #expect(requestID.renders == 1)
        #expect(output.text.hasSuffix(" info tokentool.serve: endpoint=certificates hb.request.id=req-42 serial=01ab [TokenServerTests] issued\n"))
    }

    /// A value from a request cannot end the line and forge the next one: control characters in
    /// metadata and in the message are written as escapes.
    @Test func controlCharactersAreEscaped() {
        let output = Collected()
        var logger = Logger(label: "tokentool.serve") { ServerLogHandler(label: $0, stream: output, metadataProvider: nil) }
        logger.logLevel = .info
        logger.notice("sessions ended", metadata: ["account": "dev:m\n2026-11-27T22:30:00+0000 critical tokentool.serve: FAKE", "list": ["a\tb", "\u{202E}x"]])
        logger.info("text\r\u{0}end")
        let lines = output.text.split(separator: "\n")
        #expect(lines.count == 2, "\(output.text)")
        #expect(lines.first?.contains(#"account=dev:m\n2026-11-27T22:30:00+0000 critical"#) == true, "\(output.text)")
        #expect(!output.text.contains("\t") && !output.text.unicodeScalars.contains("\u{202E}"), "\(output.text)")
        #expect(lines.last?.hasSuffix(#"text\r\u{0}end"#) == true, "\(output.text)")
    }

    @Test func writesWhatStreamLogHandlerWrites() {
        let ours = Collected(), theirs = Collected()
        // The provider's "b" overrides the handler's; a message's own "a" overrides both.
        let provider = Logger.MetadataProvider { ["b": "from-provider", "p": "1"] }
        var logger = Logger(label: "tokentool.serve") { ServerLogHandler(label: $0, stream: ours, metadataProvider: provider) }
        var reference = Logger(label: "tokentool.serve") { StreamLogHandler(label: $0, stream: theirs, metadataProvider: provider) }
        for log in [{ (logger: inout Logger) in logger.logLevel = .debug }, { $0[metadataKey: "b"] = "2"; $0[metadataKey: "a"] = ["x", "y"] }] {
            log(&logger)
            log(&reference)
        }
        for target in [logger, reference] {
            target.info("no metadata of its own")
            target.warning("with its own", metadata: ["a": "overridden", "c": ["k": "v"]])
            target.debug("at debug")
            target.error("with an error", error: Refused(), metadata: ["d": "4"])
            target.trace("below debug: not written")
        }
        #expect(ours.text.split(separator: "\n").count == 4)
        #expect(ours.text.contains("error.message=refused"))
        #expect(withoutTimestamps(ours.text) == withoutTimestamps(theirs.text))
        #expect(!ours.text.contains("not written"))
        #expect(ours.text.contains(#"a=overridden b=from-provider c=["k": "v"] p=1 [TokenServerTests] with its own"#))
    }

    @Test func metadataIsAValue() {
        let output = Collected()
        var first = Logger(label: "t") { ServerLogHandler(label: $0, stream: output, metadataProvider: nil) }
        first[metadataKey: "request"] = "1"
        var second = first
        second[metadataKey: "request"] = "2"
        first.info("first")
        second.info("second")
        #expect(output.text.contains("request=1 [TokenServerTests] first"))
        #expect(output.text.contains("request=2 [TokenServerTests] second"))
    }

    @Test func metadataProviderIsConsultedWhenWriting() {
        let output = Collected()
        let logger = Logger(label: "t") {
            ServerLogHandler(label: $0, stream: output, metadataProvider: Logger.MetadataProvider { ["trace": "t-1"] })
        }
        logger.info("traced")
        #expect(output.text.contains("trace=t-1 [TokenServerTests] traced"))
    }
}

@Suite struct CounterCacheTests {
    @Test func aCounterIsMadeOnceAndKept() throws {
        let metrics = TestMetrics()
        let cache = CounterCache(factory: metrics)
        let first = cache.counter("tokenserver_certificates_issued_total", [("provider", "dev")])
        let again = cache.counter("tokenserver_certificates_issued_total", [("provider", "dev")])
        #expect(first === again)
        let other = cache.counter("tokenserver_certificates_issued_total", [("provider", "hat")])
        let swapped = cache.counter("tokenserver_auth_decisions_total", [("provider", "dev"), ("result", "accepted")])
        let reordered = cache.counter("tokenserver_auth_decisions_total", [("result", "accepted"), ("provider", "dev")])
        #expect(first !== other && swapped !== reordered)
        first.increment()
        again.increment()
        other.increment()
        #expect(try metrics.expectCounter("tokenserver_certificates_issued_total", [("provider", "dev")]).totalValue == 2)
        #expect(try metrics.expectCounter("tokenserver_certificates_issued_total", [("provider", "hat")]).totalValue == 1)
    }

    @Test func requestCountersKeepTheirCounters() throws {
        let metrics = TestMetrics()
        let counters = RequestCounters(factory: metrics)
        #expect(counters.counter(endpoint: "auth", status: 200) === counters.counter(endpoint: "auth", status: 200))
        #expect(counters.counter(endpoint: "auth", status: 200) !== counters.counter(endpoint: "auth", status: 400))
        counters.counter(endpoint: "auth", status: 200).increment()
        #expect(try metrics.expectCounter(RequestCounters.label, [("endpoint", "auth"), ("status", "200")]).totalValue == 1)
    }
}
