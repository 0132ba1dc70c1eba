import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A JWS whose signature verified: header and raw payload bytes (any payload, not only JSON).
public struct VerifiedJWS: Sendable {
    public let header: JOSEHeader
    /// The payload's bytes, exactly as signed (a new array on each access).
    public var payload: [UInt8] { bytes.array }
    /// The key that verified the signature.
    public let key: JWTKey
    let bytes: PayloadBytes
}

/// A JWT whose signature verified and whose claims passed the policy.
public struct VerifiedToken: Sendable {
    public let header: JOSEHeader
    public let claims: RegisteredClaims
    /// The payload's JSON bytes, exactly as signed (already validated strictly); a new array on
    /// each access.
    public var payloadBytes: [UInt8] { bytes.array }
    /// Every claim of the payload. Parsed from ``payloadBytes`` on each access: keep the result
    /// if you read it more than once.
    public var payload: [String: JSONValue] {
        (try? bytes.withBytes { buffer throws(TokenError) in try JSONParser.parseObject(buffer, what: "the payload") }) ?? [:]
    }
    /// The key that verified the signature.
    public let key: JWTKey
    let bytes: PayloadBytes

    /// Decodes the payload into the caller's type. `Date` properties read NumericDates
    /// (seconds since the epoch).
    public func decode<T: Decodable>(_ type: T.Type = T.self) throws(TokenError) -> T {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        do {
            return try decoder.decode(T.self, from: bytes.withUnsafeBytes { Data($0) })
        } catch let error as DecodingError {
            throw TokenError(.payloadDecoding, "the payload does not decode as \(T.self): \(JWTVerifier.describe(error))")
        } catch {
            throw TokenError(.payloadDecoding, "the payload does not decode as \(T.self)")
        }
    }
}
