import Foundation
import Logging
import PeerCA
import TokenKit
import TokenServer

/// The service's JSON endpoints fed hostile bodies: a real `TokenService` on the embedded defaults
/// (dev HS256 provider, development CA, SQLite ledger in a temporary directory).
///
/// The first input byte picks the endpoint (even: `/v1/auth`, odd: `/v1/certificates`); in the rest,
/// `@T` is replaced by a token the dev provider accepts and `@C` by a valid CSR, so the fuzzer
/// reaches the paths past verification. Invariants: every answer is a JSON object with a known
/// status; an accepted decision or an issued certificate needs the valid token in the body's
/// `token` member; an issued certificate names the token's identity.
enum Fixture {
    /// This process's scratch directory, holding `state`. Removed when the fuzzer exits (libFuzzer
    /// calls exit() after -max_total_time or -runs); a crash (libFuzzer's _Exit) leaves it for a look.
    static let directory = NSTemporaryDirectory() + "fuzz-webhook-\(getpid())"
    static let state: String = {
        try? FileManager.default.removeItem(atPath: directory)
        // A C function pointer: captures nothing, reads the static.
        atexit { try? FileManager.default.removeItem(atPath: Fixture.directory) }
        return directory + "/state"
    }()
    static let service: TokenService = {
        let logger: Logger = {
            var logger = Logger(label: "fuzz")
            logger.logLevel = .critical
            return logger
        }()
        let service = blockingValue { () -> TokenService? in
            guard let configuration = try? ServerConfiguration.embeddedDefaults(state: state, port: 18080) else { return nil }
            return try? await TokenService.start(configuration: configuration, logger: logger)
        }
        guard let service else { fatalError("the service did not start") }
        return service
    }()
    static let token: String = {
        _ = service  // creates the state directory and the dev secret
        guard let secret = FileManager.default.contents(atPath: ServerConfiguration.devSecretPath(state: state)),
            let key = try? JWTKey.hmac(secret: Array(secret))
        else { fatalError("no dev secret") }
        let now = Int(Date().timeIntervalSince1970)
        let claims: [String: JSONValue] = [
            "iss": .string(ServerConfiguration.devIssuer), "sub": .string("fuzz-user"), "exp": .integer(now + 86_400 * 365),
        ]
        guard let token = try? JWTSigner(key: key).sign(claims: claims) else { fatalError("signing failed") }
        return token
    }()
    static let csr: String = {
        guard let key = try? CAKeyAlgorithm.p256.generate(), let csr = try? DeviceCSR.make(key: key) else { fatalError("csr") }
        return csr.replacingOccurrences(of: "\n", with: "\\n")
    }()
}

/// Runs an async body to completion from the synchronous fuzzer entry point.
final class Box<T>: @unchecked Sendable { var value: T? }

func blockingValue<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let box = Box<T>()
    let done = DispatchSemaphore(value: 0)
    Task {
        box.value = await body()
        done.signal()
    }
    done.wait()
    guard let value = box.value else { fatalError("no value") }
    return value
}

/// `haystack` with every `needle` replaced by `replacement`, on bytes (the input need not be UTF-8).
func substitute(_ haystack: [UInt8], _ needle: [UInt8], _ replacement: [UInt8]) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(haystack.count)
    var i = 0
    while i < haystack.count {
        if i + needle.count <= haystack.count, haystack[i..<(i + needle.count)].elementsEqual(needle) {
            out += replacement
            i += needle.count
        } else {
            out.append(haystack[i])
            i += 1
        }
    }
    return out
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWebhook(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let issuing = data[0] & 1 == 1
    var body = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    body = substitute(body, Array("@T".utf8), Array(Fixture.token.utf8))
    body = substitute(body, Array("@C".utf8), Array(Fixture.csr.utf8))
    let request = body
    let response = blockingValue { issuing ? await Fixture.service.issueCertificate(request) : await Fixture.service.authenticate(request) }
    guard case .object(let answer)? = try? JSONValue.parse(response.body) else { fatalError("the answer is not a JSON object") }
    guard [200, 400, 401, 403, 503].contains(response.status) else { fatalError("unexpected status \(response.status)") }
    let sentToken = (try? JSONValue.parse(request))?.objectValue?["token"]?.stringValue
    if response.status == 200, issuing || answer["authenticate"] == .bool(true) {
        guard sentToken == Fixture.token else { fatalError("accepted a body without the valid token") }
    }
    if issuing, response.status == 200, answer["spiffeID"]?.stringValue != "spiffe://dev/tokentool-dev/fuzz-user" {
        fatalError("the certificate names something other than the token's identity")
    }
    return 0
}
