import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Verifies compact JWS/JWT tokens against a fixed set of keys.
///
/// The order of checks is fixed and nothing is skipped: size cap → three segments → strict
/// base64url header → header JSON (no duplicate members) → `alg` (exact, never `none`) → `crit` →
/// key lookup by `kid` (an unknown `kid` is an error, never a fallback) or, without a `kid`, the
/// single key that accepts `alg` → the key must allow `alg` → signature length → signature →
/// payload (a JSON object, no duplicates) → registered claims (types and ranges) → ``ClaimsPolicy``.
///
/// A verifier is an immutable value: `Sendable`, synchronous, safe to call from many tasks at once.
/// It keeps a copy of its keys, policy and header cache per stripe of threads (16), so that
/// verifications on different cores share no reference count or lock. Build one per key set and
/// keep it; building costs those copies.
///
/// ```swift
/// let verifier = try JWTVerifier(
///     key: JWTKey(pem: publicKeyPEM),
///     policy: ClaimsPolicy(issuers: ["postman.hubat.net"]))
/// let token = try verifier.verify(jwt)
/// print(token.claims.subject ?? "-")
/// ```
public struct JWTVerifier: Sendable {
    /// Which implementation performs the signature step. Every other check is the same Swift
    /// code for both.
    public enum Engine: String, Sendable, CaseIterable {
        /// OpenSSL 3 called directly with keys parsed once (the default, and the fast one).
        case native
        /// libjwt 1.10 performs the signature step for HS*, RS* and ES* (it re-parses the PEM
        /// key on every call); PS* and EdDSA, which libjwt 1.10 lacks, fall back to `native`.
        case libjwt
    }

    /// One key as one shard sees it. A class, so that selecting a key per token retains one
    /// object, not three.
    final class Entry: Sendable {
        let key: JWTKey
        let libjwt: [JWTAlgorithm: LibJWTHandle]
        /// Pre-initialised OpenSSL contexts, one pool per algorithm the key accepts.
        let pools: [ContextPool]
        private let padding = CacheLinePadding()

        init(key: JWTKey, libjwt: [JWTAlgorithm: LibJWTHandle], pools: [ContextPool]) {
            self.key = key
            self.libjwt = libjwt
            self.pools = pools
        }

        func pool(_ algorithm: JWTAlgorithm) -> ContextPool? {
            for pool in pools where pool.algorithm == algorithm { return pool }
            return nil
        }

        func copyForShard() -> Entry { Entry(key: key.copyForShard(), libjwt: libjwt, pools: pools.map { $0.copy() }) }
    }

    /// Everything verifying a token retains, one copy per stripe of threads (``ThreadIndex``):
    /// the key entries, the policy, the prepared required claims and the header cache. Threads on
    /// different stripes then never write the same reference count. Sharing them held HS256 on two
    /// cores to about 1.5× one core: each retain of a shared object moves its cache line between
    /// the cores.
    final class Shard: Sendable {
        let entries: [Entry]
        let policy: ClaimsPolicy
        /// `policy.requiredClaims` prepared for the hot path's payload reader.
        let required: FastPayload.Required
        let headers = HeaderCache()
        private let padding = CacheLinePadding()

        init(entries: [Entry], policy: ClaimsPolicy) {
            self.entries = entries
            self.policy = policy
            required = FastPayload.Required(policy.requiredClaims)
        }

        func copy() -> Shard { Shard(entries: entries.map { $0.copyForShard() }, policy: policy.copyForShard()) }

        /// The policy for claims whose required ones are known to be present, for the cache-hit
        /// path (there `shard.policy.check` copied the policy: ten retains and releases).
        func check(_ claims: RegisteredClaims, header: JOSEHeader, now: Double) throws(TokenError) {
            try policy.check(claims, missingRequired: { nil }, header: header, now: now)
        }
    }

    public let policy: ClaimsPolicy
    public let engine: Engine
    public let clock: VerificationClock
    /// Tokens longer than this many bytes are refused before any decoding. Default 16 KiB.
    public let maxTokenBytes: Int
    /// The keys this verifier accepts.
    public var keys: [JWTKey] { shards[0].entries.map(\.key) }

    /// A power of two: a thread's shard is the low bits of its ``ThreadIndex``.
    static let shardCount = 16
    /// `shardCount` shards; the first holds the caller's keys and policy, the others copies.
    private let shards: [Shard]
    private let byKid: [String: Int]
    private let tokenCache: TokenCache?

    /// The calling thread's shard.
    private var shard: Shard { shards[ThreadIndex.current & (JWTVerifier.shardCount - 1)] }

    /// Number of tokens in the verified-token cache (0 without one).
    public var cachedTokenCount: Int { tokenCache?.count ?? 0 }

    /// A verifier over several keys. Keys must have distinct `kid`s.
    public init(
        keys: [JWTKey], policy: ClaimsPolicy = ClaimsPolicy(), engine: Engine = .native,
        clock: VerificationClock = .system, maxTokenBytes: Int = 16 * 1024, cache: VerifiedTokenCache? = nil
    ) throws(TokenError) {
        guard !keys.isEmpty else { throw TokenError(.invalidKeySet, "a verifier needs at least one key") }
        var byKid: [String: Int] = [:]
        var entries: [Entry] = []
        for (index, key) in keys.enumerated() {
            if let kid = key.kid {
                if byKid.updateValue(index, forKey: kid) != nil {
                    throw TokenError(.invalidKeySet, "two keys share the kid \"\(JSONParser.printable(kid))\"")
                }
            }
            var handles: [JWTAlgorithm: LibJWTHandle] = [:]
            if engine == .libjwt {
                for algorithm in key.algorithms where LibJWTHandle.supported.contains(algorithm) {
                    handles[algorithm] = try LibJWTHandle(algorithm: algorithm, key: key)
                }
            }
            let pools = key.algorithms.map { ContextPool(algorithm: $0, key: key) }
            entries.append(Entry(key: key, libjwt: handles, pools: pools))
        }
        let first = Shard(entries: entries, policy: policy)
        self.shards = [first] + (1..<JWTVerifier.shardCount).map { _ in first.copy() }
        self.byKid = byKid
        self.policy = policy
        self.engine = engine
        self.clock = clock
        self.maxTokenBytes = maxTokenBytes
        self.tokenCache = cache.map(TokenCache.init)
    }

    /// A verifier over one key.
    public init(
        key: JWTKey, policy: ClaimsPolicy = ClaimsPolicy(), engine: Engine = .native,
        clock: VerificationClock = .system, maxTokenBytes: Int = 16 * 1024, cache: VerifiedTokenCache? = nil
    ) throws(TokenError) {
        try self.init(keys: [key], policy: policy, engine: engine, clock: clock, maxTokenBytes: maxTokenBytes, cache: cache)
    }

    /// A verifier over the keys of a JWK Set.
    public init(
        keySet: JWKSet, policy: ClaimsPolicy = ClaimsPolicy(), engine: Engine = .native,
        clock: VerificationClock = .system, maxTokenBytes: Int = 16 * 1024, cache: VerifiedTokenCache? = nil
    ) throws(TokenError) {
        try self.init(keys: keySet.keys, policy: policy, engine: engine, clock: clock, maxTokenBytes: maxTokenBytes, cache: cache)
    }

    // MARK: Verification

    /// Verifies a JWT: signature, then claims and policy. With a ``VerifiedTokenCache``, a token
    /// seen before (byte for byte) skips the signature and parsing, but never the claims policy.
    public func verify(_ token: String) throws(TokenError) -> VerifiedToken {
        let shard = self.shard
        guard let tokenCache else { return try checkClaims(verifySignature(token, shard: shard), shard: shard) }
        // Each closure returns a small value: passing a VerifiedToken out through the typed-throws
        // wrapper costs copies that show on the cache-hit path.
        let slot = try withTokenBytes(token) { bytes throws(TokenError) in tokenCache.hash(bytes) }
        if let hit = try token.withUTF8Bytes({ bytes throws(TokenError) in tokenCache.lookup(bytes, hash: slot) }) {
            do throws(TokenError) {
                try shard.check(hit.claims, header: hit.header, now: clock.now)
                return hit
            } catch {
                tokenCache.remove(hash: slot)
                throw error
            }
        }
        let verified = try checkClaims(verifySignature(token, shard: shard), shard: shard)
        try token.withUTF8Bytes { bytes throws(TokenError) in tokenCache.insert(bytes, hash: slot, verified) }
        return verified
    }

    /// The payload and the claims policy, after the signature verified.
    private func checkClaims(_ jws: VerifiedJWS, shard: Shard) throws(TokenError) -> VerifiedToken {
        let fast = FastPayload.scan(jws.bytes, required: shard.required)
        let claims: RegisteredClaims
        if let fast, fast.hasRequired {
            claims = fast.claims
            // Not `shard.check`: through it this path measured 35 ns slower (870 → 905 ns, HS256),
            // while the cache-hit path is 45 ns faster through it. Same check either way.
            try shard.policy.check(claims, missingRequired: { nil }, header: jws.header, now: clock.now)
        } else {
            // Anything the fast reader does not handle, and every error, goes through the full parser.
            let payload = try jws.bytes.withBytes { buffer throws(TokenError) in
                try JSONParser.parseObject(buffer, what: "the payload")
            }
            claims = try RegisteredClaims(payload: payload)
            try shard.policy.check(
                claims, missingRequired: { shard.policy.requiredClaims.sorted().first { payload[$0] == nil } }, header: jws.header, now: clock.now)
        }
        return VerifiedToken(header: jws.header, claims: claims, key: jws.key, bytes: jws.bytes)
    }

    /// Verifies a JWT and decodes its payload into `T`.
    public func verify<T: Decodable>(_ token: String, as type: T.Type) throws(TokenError) -> T {
        try verify(token).decode(T.self)
    }

    /// Verifies only the JWS layer (header rules, key selection, signature); the payload may be
    /// any bytes and no claims are checked. Use ``verify(_:)`` for JWTs.
    public func verifySignature(_ token: String) throws(TokenError) -> VerifiedJWS {
        try verifySignature(token, shard: shard)
    }

    private func verifySignature(_ token: String, shard: Shard) throws(TokenError) -> VerifiedJWS {
        try withTokenBytes(token) { bytes throws(TokenError) in try verifySignature(utf8: bytes, shard: shard) }
    }

    /// The size cap, checked before any decoding, then the token's UTF-8 bytes.
    @inline(__always)
    private func withTokenBytes<R>(_ token: String, _ body: (UnsafeRawBufferPointer) throws(TokenError) -> R) throws(TokenError) -> R {
        try CompactJWS.checkSize(token.utf8.count, limit: maxTokenBytes)
        return try token.withUTF8Bytes(body)
    }

    private func verifySignature(utf8 token: UnsafeRawBufferPointer, shard: Shard) throws(TokenError) -> VerifiedJWS {
        let parts = try CompactJWS.split(token)
        let header: JOSEHeader
        let entry: Entry
        if let (cached, index) = shard.headers.lookup(parts.header) {
            header = cached
            entry = shard.entries[index]
        } else {
            header = try JOSEHeader(members: try CompactJWS.decodeHeader(parts.header), understoodCritical: shard.policy.understoodCriticalHeaders)
            let index = try select(for: header, entries: shard.entries)
            entry = shard.entries[index]
            shard.headers.insert(parts.header, header: header, entry: index)
        }
        let algorithm = header.algorithm
        guard let signatureCount = Base64URL.decodedCount(parts.signature.count) else {
            throw CompactJWS.invalidBase64("signature", parts.signature)
        }
        let result = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(signatureCount, 1)) { buffer -> Result<Void, TokenError> in
            let signature = UnsafeMutableBufferPointer(rebasing: buffer[0..<signatureCount])
            guard Base64URL.decode(parts.signature, into: signature) else {
                return .failure(CompactJWS.invalidBase64("signature", parts.signature))
            }
            return Result { () throws(TokenError) in
                try JWTVerifier.checkSignature(
                    algorithm, key: entry.key, libjwt: engine == .libjwt ? entry.libjwt[algorithm] : nil, pool: entry.pool(algorithm),
                    signingInput: parts.signingInput, signature: UnsafeRawBufferPointer(signature), signatureSegment: parts.signature)
            }
        }
        try result.get()
        guard let payload = PayloadBytes.decode(parts.payload) else {
            throw CompactJWS.invalidBase64("payload", parts.payload)
        }
        return VerifiedJWS(header: header, key: entry.key, bytes: payload)
    }

    /// Key lookup: by `kid` when the token names one, else the single key accepting `alg`.
    private func select(for header: JOSEHeader, entries: [Entry]) throws(TokenError) -> Int {
        let algorithm = header.algorithm
        let index: Int
        if let kid = header.keyID {
            guard let found = byKid[kid] else {
                throw TokenError(.unknownKey, "no key has kid \"\(JSONParser.printable(kid))\"")
            }
            let key = entries[found].key
            guard key.algorithms.contains(algorithm) else {
                throw TokenError(.algorithmNotAllowed, "key \"\(JSONParser.printable(kid))\" does not accept \(algorithm) (it accepts \(key.algorithms.map(\.rawValue).sorted().joined(separator: ", ")))")
            }
            index = found
        } else {
            let candidates = entries.indices.filter { entries[$0].key.algorithms.contains(algorithm) }
            guard let first = candidates.first else {
                let accepted = Set(entries.flatMap(\.key.algorithms)).map(\.rawValue).sorted().joined(separator: ", ")
                throw TokenError(.algorithmNotAllowed, "no key accepts \(algorithm) (\(entries.count == 1 ? "the key accepts" : "the keys accept") \(accepted))")
            }
            guard candidates.count == 1 else {
                throw TokenError(.unknownKey, "the token has no kid and \(candidates.count) keys accept \(algorithm); it must name its key")
            }
            index = first
        }
        guard entries[index].key.usableForVerification else {
            throw TokenError(.keyNotUsable, "the key's use/key_ops do not allow verifying signatures")
        }
        return index
    }

    /// The signature step shared by both engines: exact length for the algorithm and key, then
    /// libjwt (when given a handle) or OpenSSL through pre-initialised contexts.
    static func checkSignature(
        _ algorithm: JWTAlgorithm, key: JWTKey, libjwt: LibJWTHandle?, pool: ContextPool?, signingInput: UnsafeRawBufferPointer,
        signature: UnsafeRawBufferPointer, signatureSegment: UnsafeRawBufferPointer
    ) throws(TokenError) {
        let expected = signatureLength(algorithm, key: key)
        guard signature.count == expected else {
            throw TokenError(.badSignature, "the signature is \(signature.count) bytes; \(algorithm) with this key makes \(expected)")
        }
        let valid: Bool
        if let libjwt {
            valid = libjwt.verify(signingInput: signingInput, signatureSegment: signatureSegment)
        } else {
            // Without a verifier's pool (the conformance tests), a fresh pool: same code path.
            valid = (pool ?? ContextPool(algorithm: algorithm, key: key)).verify(message: signingInput, signature: signature)
        }
        guard valid else { throw TokenError(.badSignature, "the \(algorithm) signature does not verify") }
    }

    static func signatureLength(_ algorithm: JWTAlgorithm, key: JWTKey) -> Int {
        switch (algorithm.family, key.type) {
        case (.hmac, _): algorithm.hashLength
        case (.ecdsa, .ec(let curve)): 2 * curve.coordinateLength
        case (.eddsa, _): 64
        case (_, .rsa(let bits)): (bits + 7) / 8
        default: 0
        }
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let p = context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
            return p.isEmpty ? "" : " at \(p)"
        }
        switch error {
        case .typeMismatch(_, let c): return "type mismatch\(path(c))"
        case .valueNotFound(_, let c): return "missing value\(path(c))"
        case .keyNotFound(let key, let c): return "missing \"\(key.stringValue)\"\(path(c))"
        case .dataCorrupted(let c): return "invalid data\(path(c))"
        @unknown default: return "invalid payload"
        }
    }
}
