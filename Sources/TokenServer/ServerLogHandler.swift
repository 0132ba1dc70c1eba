public import Logging
import TokenKit

/// A log handler that writes what swift-log's `StreamLogHandler` writes, in the same format, but
/// formats its metadata only when a message is logged.
///
/// `StreamLogHandler` formats its whole metadata into a string every time the metadata changes.
/// Hummingbird sets a request ID in the logger's metadata for every request, so with that handler
/// every request pays for the formatting (sorting the keys, rendering the request ID: ≈ 4 µs of
/// the server's CPU per request, `PERF_SECONDS=6 scripts/issuance_load.sh`), even when the
/// request logs nothing, which at the default `info` level is almost every request. This handler
/// keeps the metadata as given, and hands it to a `StreamLogHandler` only for a message that is
/// written.
///
/// ```swift
/// let logger = Logger(label: "tokentool.serve") { ServerLogHandler.standardError(label: $0) }
/// ```
public struct ServerLogHandler: LogHandler {
    /// The handler that writes a message, made for each message written.
    private let output: @Sendable () -> StreamLogHandler

    /// The least severe level this handler writes (`Logger` checks it before calling ``log(event:)``).
    public var logLevel: Logger.Level = .info

    /// Metadata added to every message, formatted only when a message is written.
    public var metadata: Logger.Metadata = [:]

    /// The metadata provider consulted for every written message.
    public var metadataProvider: Logger.MetadataProvider?

    /// A handler that writes to standard error, where swift-log's default handler writes.
    public static func standardError(label: String, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) -> ServerLogHandler {
        ServerLogHandler(metadataProvider: metadataProvider) { StreamLogHandler.standardError(label: label, metadataProvider: nil) }
    }

    /// A handler that writes to `stream`.
    public init(label: String, stream: any TextOutputStream & Sendable, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.init(metadataProvider: metadataProvider) { StreamLogHandler(label: label, stream: stream, metadataProvider: nil) }
    }

    private init(metadataProvider: Logger.MetadataProvider?, output: @escaping @Sendable () -> StreamLogHandler) {
        self.metadataProvider = metadataProvider
        self.output = output
    }

    /// One metadata item; setting it stores the value as given, unformatted.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes `event` as `StreamLogHandler` would: this handler's metadata, then the provider's,
    /// then the event's own (later ones win for the same key), merged and handed over as the
    /// event's own, so they are formatted once.
    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty { merged.merge(provided) { $1 } }
        if let explicit = event.metadata, !explicit.isEmpty { merged.merge(explicit) { $1 } }
        var event = event
        event.metadata = merged.mapValues(Self.escaped)
        event.message = Logger.Message(stringLiteral: Self.escaped(event.message.description))
        output().log(event: event)
    }

    /// A metadata value with its control characters written as escapes: a value from a request (a
    /// token's `sub`, an error's text) cannot end the line and forge the next one.
    static func escaped(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(escaped(text))
        case .stringConvertible(let item): .string(escaped(item.description))
        case .array(let items): .array(items.map(escaped))
        case .dictionary(let items): .dictionary(items.mapValues(escaped))
        }
    }

    /// `text` with control and bidi formatting characters as escapes (`UnprintableText`).
    static func escaped(_ text: String) -> String { UnprintableText.escaped(text) }
}
