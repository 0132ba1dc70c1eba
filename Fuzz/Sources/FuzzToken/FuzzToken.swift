import Foundation
import TokenKit

/// Token parsing and verification. The first byte picks a mode:
/// - even: the input is a compact token, verified as it is (and decoded without verification);
/// - odd: the rest is "header\npayload" JSON text, which the harness signs with its HMAC key so
///   that the payload reaches the claims checks. Then a differential check: if verification
///   succeeds, the strict parser must accept the payload as a JSON object (the hot path's
///   payload reader may never be looser than the parser), and the registered claims it reads
///   from that object must equal the ones verification gave (what the reader reads is what the
///   parser reads).
enum Harness {
    static let key: JWTKey = {
        do { return try JWTKey.hmac(secret: Array(repeating: 0x42, count: 32), kid: "fuzz") } catch { fatalError("\(error)") }
    }()
    static let verifier: JWTVerifier = {
        do {
            return try JWTVerifier(key: key, policy: ClaimsPolicy(maxAge: 86400, issuers: ["i"], requiredClaims: ["sub"]), clock: .fixed(1_700_000_000))
        } catch { fatalError("\(error)") }
    }()
    static let lenient: JWTVerifier = {
        do {
            return try JWTVerifier(key: key, policy: ClaimsPolicy(requireExpiration: false, ignoresAudience: true), clock: .fixed(1_700_000_000), cache: VerifiedTokenCache(capacity: 64))
        } catch { fatalError("\(error)") }
    }()
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzToken(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let mode = bytes.first else { return 0 }
    let rest = String(decoding: bytes.dropFirst(), as: UTF8.self)
    if mode & 1 == 0 {
        _ = try? Harness.verifier.verify(rest)
        _ = try? Harness.lenient.verify(rest)
        _ = try? UnverifiedToken(rest)
        return 0
    }
    let pieces = rest.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
    let header = Base64URL.encode(Array((pieces.first.map(String.init) ?? "").utf8))
    let payloadText = pieces.count > 1 ? String(pieces[1]) : ""
    let payload = Base64URL.encode(Array(payloadText.utf8))
    let input = header + "." + payload
    guard let mac = try? JWTSigner(key: Harness.key).signature(forSigningInput: Array(input.utf8)) else { return 0 }
    let token = input + "." + Base64URL.encode(mac)
    for verifier in [Harness.verifier, Harness.lenient] {
        if let verified = try? verifier.verify(token) {
            guard case .object(let object)? = try? JSONValue.parse(Array(payloadText.utf8)) else {
                fatalError("verify accepted a payload the strict parser refuses")
            }
            guard let strict = try? RegisteredClaims(payload: object), strict == verified.claims else {
                fatalError("verify read other claims than the strict parser: \(payloadText)")
            }
            _ = verified.payload
            _ = verified.claims.issuer
            _ = verified.claims.audience
        }
    }
    return 0
}

