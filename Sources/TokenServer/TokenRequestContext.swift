public import Hummingbird
public import NIOCore

/// The request context of the service's routes: Hummingbird's basic context plus the connection's
/// channel, whose TLS handler holds the certificate a client presented (renewal by mutual TLS).
public struct TokenRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connection the request came on.
    public let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
