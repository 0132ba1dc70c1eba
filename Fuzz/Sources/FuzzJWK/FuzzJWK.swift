import TokenKit

/// JWK and JWK Set parsing, and what a parsed key can do (export, thumbprint, verifier).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzJWK(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if let key = try? JWTKey(jwk: text) {
        _ = try? key.thumbprint()
        _ = try? key.jwkText(includePrivate: true)
        _ = try? key.publicPEM()
        _ = try? JWTVerifier(key: key).verify("eyJhbGciOiJIUzI1NiJ9.e30.AAAA")
    }
    if let set = try? JWKSet(json: text) {
        _ = try? set.jsonText()
        if !set.keys.isEmpty { _ = try? JWTVerifier(keySet: set) }
    }
    _ = try? JSONValue.parse(text)
    return 0
}
