import Foundation
import Hummingbird
import Logging
import UnixSignals

/// The floor the webhook is measured against (`bareroute`): a Hummingbird 2 application with
/// one route, `POST /v1/auth`, that reads the whole body (up to 64 KiB, as the service does) and
/// answers a short JSON — the framework's cost for the request the webhook answers, without the
/// webhook's work. Listens on 127.0.0.1, a port the OS picks, printed as "listening on PORT",
/// until SIGTERM or SIGINT. scripts/peer_load.sh loads it and `tokentool serve` with the same
/// requests in one run.
@main
enum BareRoute {
    static func main() async throws {
        let router = Router()
        router.post("/v1/auth") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 64 * 1024)
            let answer = ByteBuffer(string: "{\"authenticated\":true,\"bytes\":\(body.readableBytes)}")
            return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: answer))
        }
        var logger = Logger(label: "tokenbench.bare-route")
        logger.logLevel = .warning
        let application = Application(
            router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0), serverName: "bare-route"),
            onServerRunning: { channel in
                // Standard output unbuffered: the line must reach a pipe at once.
                FileHandle.standardOutput.write(Data("listening on \(channel.localAddress?.port ?? 0)\n".utf8))
            },
            logger: logger)
        try await application.runService(gracefulShutdownSignals: [.sigterm, .sigint])
    }
}
