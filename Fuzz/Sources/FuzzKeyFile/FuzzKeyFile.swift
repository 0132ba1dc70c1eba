@_spi(Testing) import TokenKit

/// PEM and DER key files (SPKI, PKCS#1, PKCS#8, traditional, certificates).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzKeyFile(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let key = try? JWTKey(pemOrDER: bytes) {
        _ = try? key.thumbprint()
        _ = try? key.jwk(includePrivate: true)
    }
    // PEM.parse reads ASCII text on its bytes: it must answer as the Character reading does.
    let text = String(decoding: bytes, as: UTF8.self)
    let byBytes = Result { () throws(TokenError) in try PEM.parse(text) }
    let byCharacters = Result { () throws(TokenError) in try PEM.parseCharacters(text) }
    switch (byBytes, byCharacters) {
    case (.success(let a), .success(let b)) where a == b: break
    case (.failure(let a), .failure(let b)) where a == b: break
    default: fatalError("PEM.parse and PEM.parseCharacters disagree: \(byBytes) against \(byCharacters)")
    }
    return 0
}
