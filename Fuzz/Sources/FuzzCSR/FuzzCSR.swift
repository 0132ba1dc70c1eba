import Foundation
@_spi(Testing) import PeerCA
import TokenKit

/// CSR parsing and issuance: every input is checked as a CSR (PEM or DER); one that passes is
/// issued by a real CA into an in-memory ledger, and the certificate must name only the token's
/// identity. Also feeds the input to the OCSP responder and the CRL parser.
enum Fixture {
    static let key: JWTKey = (try? JWTKey.generate(.ec(.p256))) ?? { fatalError("key generation failed") }()
    static let material = (try? CertificateAuthority.create(name: "Fuzz", withIntermediate: true)) ?? { fatalError("CA creation failed") }()
    static let ca: PeerCertificateAuthority = {
        guard let policy = try? IssuancePolicy(appID: "fuzz", provider: "fuzz") else { fatalError("policy") }
        return PeerCertificateAuthority(authority: material.authority, policy: policy, ledger: MemoryLedger())
    }()
    static let token: VerifiedToken = {
        let now = Int(Date().timeIntervalSince1970)
        guard let jwt = try? JWTSigner(key: key).sign(claims: ["iss": .string("https://idp/"), "sub": .string("u"), "exp": .integer(now + 3600)]),
            let verified = try? JWTVerifier(key: key.publicKey).verify(jwt)
        else { fatalError("token") }
        return verified
    }()
}

/// A ledger in memory: the fuzzer exercises parsing and signing, not SQLite.
final class MemoryLedger: CertificateLedger, @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [String: LedgerEntry] = [:]
    func record(_ entry: LedgerEntry, claiming use: TokenUse?) async throws(PeerCAError) {
        lock.withLock { entries[entry.serial] = entry }
    }
    func entry(serial: String) async throws(PeerCAError) -> LedgerEntry? { lock.withLock { entries[serial] } }
    func entries(subject: String) async throws(PeerCAError) -> [LedgerEntry] { lock.withLock { entries.values.filter { $0.subject == subject } } }
    func recent(limit: Int) async throws(PeerCAError) -> [LedgerEntry] { [] }
    func revoke(serial: String, reason: LedgerEntry.RevocationReason, at: Date) async throws(PeerCAError) -> LedgerEntry {
        throw PeerCAError(.notFound, "none")
    }
    func revoked(notExpiredAt now: Date) async throws(PeerCAError) -> [LedgerEntry] { [] }
    func nextCRLNumber() async throws(PeerCAError) -> Int64 { 1 }
    func revokeAccount(_ account: String, reason: LedgerEntry.RevocationReason, at date: Date) async throws(PeerCAError) -> [LedgerEntry] { [] }
    func endedSessions(since: Date) async throws(PeerCAError) -> [String: Date] { [:] }
}

/// Runs an async body to completion from the synchronous fuzzer entry point.
func block(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task {
        await body()
        done.signal()
    }
    done.wait()
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCSR(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // The direct P-256 path and swift-certificates' parser must agree on every input.
    let direct = Result { () throws(PeerCAError) in try ValidatedCSR(bytes) }
    let generic = Result { () throws(PeerCAError) in try ValidatedCSR(bytes, fastPath: false) }
    switch (direct, generic) {
    case (.success(let a), .success(let b)):
        guard a.keyFingerprint == b.keyFingerprint, a.keyKind == b.keyKind, a.derBytes == b.derBytes else {
            fatalError("the direct path and the generic parser accepted different keys")
        }
    case (.failure(let a), .failure(let b)):
        guard a == b else { fatalError("the direct path and the generic parser refused differently: \(a) / \(b)") }
    default:
        fatalError("the direct path and the generic parser disagree: \(direct) / \(generic)")
    }
    if let csr = try? direct.get() {
        block {
            guard let issued = try? await Fixture.ca.issue(token: Fixture.token, csr: csr) else { fatalError("a valid CSR was not issued") }
            // The hand-written leaf DER parses, names the token's identity and certifies the CSR's key.
            guard let certificate = try? issued.certificate else { fatalError("the issued certificate does not parse") }
            guard issued.identity.spiffeID == "spiffe://fuzz/idp/u", certificate.publicKey == (try? csr.publicKey),
                (try? certificate.extensions.subjectAlternativeNames)?.first == .uniformResourceIdentifier("spiffe://fuzz/idp/u")
            else {
                fatalError("the certificate names something other than the token's identity")
            }
        }
    }
    block { _ = await Fixture.ca.ocspResponse(for: bytes) }
    _ = try? RevocationList(bytes, issuer: Fixture.material.authority.issuer)
    return 0
}
