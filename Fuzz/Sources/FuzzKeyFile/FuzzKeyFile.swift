import TokenKit

/// PEM and DER key files (SPKI, PKCS#1, PKCS#8, traditional, certificates).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzKeyFile(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let key = try? JWTKey(pemOrDER: bytes) {
        _ = try? key.thumbprint()
        _ = try? key.jwk(includePrivate: true)
    }
    _ = try? PEM.parse(String(decoding: bytes, as: UTF8.self))
    return 0
}
