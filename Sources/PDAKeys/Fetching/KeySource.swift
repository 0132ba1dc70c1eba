/// Where an issuer publishes its public keys.
public enum KeySource: Hashable, Sendable, CustomStringConvertible {
    /// A HAT PDA: `GET https://<host>/publickey` returns one RSA public key as PEM (SPKI); the
    /// key verifies RS256 only. `host` is a DNS name that passed an ``IssuerAllowList``.
    case pda(host: String)
    /// A JWK Set at an HTTPS URL (e.g. Auth0's `https://<tenant>/.well-known/jwks.json`).
    case jwks(url: String)
    /// OpenID Connect discovery: `<issuer>/.well-known/openid-configuration` names the
    /// `jwks_uri`; the document's `issuer` must equal this one exactly.
    case oidc(issuer: String)

    public var description: String {
        switch self {
        case .pda(let host): "PDA \(host)"
        case .jwks(let url): "JWKS \(url)"
        case .oidc(let issuer): "OIDC issuer \(issuer)"
        }
    }

    /// A short label for metrics dimensions: `pda`, `jwks` or `oidc`.
    public var kind: String {
        switch self {
        case .pda: "pda"
        case .jwks: "jwks"
        case .oidc: "oidc"
        }
    }
}

/// The keys one source published, as fetched at one moment.
public struct RemoteKeySet: Sendable {
    /// The source they came from.
    public let source: KeySource
    /// The verification keys (public keys only; PDA keys accept RS256 only).
    public let keys: [JWTKey]
    /// Entries of a JWK Set that were skipped (encryption keys, unknown `kty`), one line each.
    public let skipped: [String]
    /// When they were fetched (seconds since the Unix epoch, from the store's clock).
    public let fetchedAt: Double
    /// When they stop being fresh: `fetchedAt` + the TTL (`Cache-Control: max-age`, clamped).
    public let expiresAt: Double
    /// Increases by one with every successful fetch of this source in a store.
    public let generation: Int
}

public import TokenKit
