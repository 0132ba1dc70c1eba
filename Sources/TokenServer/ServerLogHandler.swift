public import Logging

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
    private let label: String
    private let output: @Sendable (String) -> StreamLogHandler

    /// The least severe level this handler writes.
    public var logLevel: Logger.Level = .info

    /// Metadata added to every message, formatted only when a message is written.
    public var metadata: Logger.Metadata = [:]

    /// The metadata provider consulted for every written message.
    public var metadataProvider: Logger.MetadataProvider?

    /// A handler that writes to standard output.
    public static func standardOutput(label: String, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) -> ServerLogHandler {
        ServerLogHandler(label: label, metadataProvider: metadataProvider) { label in
            StreamLogHandler.standardOutput(label: label, metadataProvider: nil)
        }
    }

    /// A handler that writes to standard error, where swift-log's default handler writes.
    public static func standardError(label: String, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) -> ServerLogHandler {
        ServerLogHandler(label: label, metadataProvider: metadataProvider) { label in
            StreamLogHandler.standardError(label: label, metadataProvider: nil)
        }
    }

    /// A handler that writes to `stream`.
    public init(label: String, stream: any TextOutputStream & Sendable, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.init(label: label, metadataProvider: metadataProvider) { label in
            StreamLogHandler(label: label, stream: stream, metadataProvider: nil)
        }
    }

    private init(
        label: String, metadataProvider: Logger.MetadataProvider?,
        output: @escaping @Sendable (String) -> StreamLogHandler
    ) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.output = output
    }

    /// One metadata item; setting it stores the value as given, unformatted.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes `event` as `StreamLogHandler` would: this handler's metadata, then the provider's,
    /// then the event's own (later ones win for the same key), formatted once.
    public func log(event: LogEvent) {
        // Merged as StreamLogHandler merges (the handler's metadata, then the provider's, then the
        // message's), and handed over as the message's own, so it is formatted once.
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty { merged.merge(provided) { $1 } }
        if let explicit = event.metadata, !explicit.isEmpty { merged.merge(explicit) { $1 } }
        var event = event
        event.metadata = merged
        var handler = output(label)
        handler.logLevel = logLevel
        handler.log(event: event)
    }
}
