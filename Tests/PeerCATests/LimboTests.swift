import Foundation
@testable import PeerCA
import SwiftASN1
import TestSupport
import Testing
import TokenKit
import X509

/// x509-limbo (C2SP/x509-limbo, Apache-2.0; TestVectors/limbo/LICENSE, provenance in
/// TestVectors/limbo/README.md): every path-validation testcase runs through PeerVerifier's chain
/// validation (`PeerVerifier.validate(leaf:intermediates:role:requireSPIFFEID:)` with
/// `requireSPIFFEID: false`): swift-certificates' path building and RFC5280Policy at the case's
/// `validation_time`, plus PeerLeafPolicy without the SPIFFE ID rules (EKU for the role from
/// `validation_kind`, leaf not a CA, CA key usage, revocation). The SPIFFE rules would refuse every
/// limbo leaf, which name DNS hosts; the public `verify` always applies them.
///
/// - `crls`: each CRL becomes a ``RevocationList`` verified against the case's certificate that
///   issued it; a CRL that RevocationList refuses fails the case (a deployment cannot start with
///   it). PeerVerifier takes one CRL, so a case with several runs once per CRL and succeeds only
///   if every run does.
/// - Not used: `expected_peer_name(s)` (PeerVerifier identifies peers by SPIFFE ID),
///   `max_chain_depth`, `key_usage` and `signature_algorithms` (PeerVerifier takes no such
///   constraints), `extended_key_usage` (PeerVerifier requires the role's purpose).
///
/// Every case must give limbo's `expected_result`, except the ones in ``deviations`` (run, and
/// must still give our documented verdict, not upstream's) and ``notRun``.
@Suite("x509-limbo path validation through PeerVerifier")
struct LimboTests {
    enum Verdict: Equatable, CustomStringConvertible {
        case success
        case failure(String)

        var succeeded: Bool { self == .success }
        var description: String {
            switch self {
            case .success: "SUCCESS"
            case .failure(let reason): "FAILURE (\(reason.prefix(160)))"
            }
        }
    }

    /// Why PeerVerifier's verdict differs from limbo's, and what it says instead.
    enum Why: String, CaseIterable {
        /// Accepted. The verdict depends only on the leaf's DNS/IP names: matching the expected
        /// peer name (RFC 6125/9525), wildcard and public-suffix rules, CN/SAN agreement (CA/B BR
        /// 7.1.4.3), DNS/IP syntax in the SAN. PeerVerifier does no host-name matching: peers are
        /// identified by their SPIFFE ID, and the public `verify` refuses any leaf without exactly
        /// one SPIFFE URI SAN. The chain itself validates.
        case peerName
        /// Accepted. A rule on what a conforming CA issues (RFC 5280 §4 profile: AKI/SKI present,
        /// criticality of SAN, name and policy constraints and basic constraints, serial number
        /// form, non-empty CA subject, name constraints only in CA certificates and not empty),
        /// not a step of path validation (§6); swift-certificates does not police it. Such a
        /// certificate reaches an accepted chain only through a trusted CA; ours issues none.
        case caProfile
        /// Accepted. A CA/Browser Forum Baseline Requirements rule for the public Web PKI (root
        /// AKI form, anyExtendedKeyUsage or critical EKU in a leaf, EKU in a root, AIA syntax,
        /// RSA modulus a multiple of 8 bits), not RFC 5280. PeerVerifier checks a private CA's chains.
        case webPKI
        /// Refused: stricter by design. A CA certificate is not a peer certificate (RFC 5280
        /// allows one in leaf position; webpki::ca-as-leaf refuses it, as we do).
        case caAsLeaf
        /// Refused: stricter by design. A peer certificate must carry an EKU with the role's
        /// purpose (RFC 5280 makes EKU optional; webpki::eku::ee-without-eku agrees with us).
        case ekuRequired
        /// Refused (fails closed): swift-certificates does not implement directoryName, rfc822Name
        /// or otherName name constraints and refuses any chain where one would apply.
        case nameConstraintFormUnsupported
        /// Refused (fails closed): swift-certificates applies name constraints to a self-issued
        /// intermediate, which RFC 5280 §4.2.1.10 exempts.
        case nameConstraintsOnSelfIssued
        /// Accepted: swift-certificates is lenient with DNS name constraints: a wildcard SAN
        /// (`*.example.com`) is compared with an excluded or permitted subtree literally (the
        /// CVE-2025-61727 ambiguity), and a leading-period DNS constraint is taken. Name
        /// constraints come only from trusted roots and CA-issued intermediates (ours set none),
        /// and they constrain DNS names, which PeerVerifier does not use to identify peers.
        case nameConstraintsLenient
        /// Accepted: the CRL is taken by ``RevocationList`` (Revocation/CRL.swift, outside
        /// PeerVerifier), which requires neither a non-critical CRL number (RFC 5280 §5.2.3) nor
        /// cRLSign in its issuer's key usage (§6.3.3 (f)). The leaf is not on these CRLs; limbo
        /// expects the CRL refused and validation to fail closed.
        case crlProfile
        /// Accepted: the case sets `max_chain_depth`, a caller's limit PeerVerifier does not take
        /// (its own bound is ``PeerVerifier/maxIntermediates`` presented certificates).
        case maxChainDepth
        /// Refused: more than ``PeerVerifier/maxIntermediates`` certificates follow the leaf
        /// (a bound on path-building work; our CA's chains carry one intermediate).
        case intermediateCap
        /// Accepted: 2048 name constraints against 2048 names is technically valid (limbo expects
        /// a refusal from implementations that bound the work); swift-certificates evaluates them.
        /// The constraints sit in a trusted root, which peers cannot present.
        case nameConstraintsDoS

        /// What we answer: nil for accepted, else text our refusal contains (one of them).
        var refusal: [String]? {
            switch self {
            case .peerName, .caProfile, .webPKI, .nameConstraintsLenient, .crlProfile, .maxChainDepth, .nameConstraintsDoS: nil
            case .caAsLeaf: ["the leaf is a CA certificate"]
            case .ekuRequired: ["the leaf has no extended key usage"]
            case .nameConstraintFormUnsupported: ["name constraints are not supported", "unsupported constraint"]
            case .nameConstraintsOnSelfIssued: ["Unable to validate permitted subtree"]
            case .intermediateCap: ["at most \(PeerVerifier.maxIntermediates) are accepted"]
            }
        }
    }

    /// Cases run whose verdict differs from limbo's, by design or as a documented limitation.
    static let deviations: [String: Why] = [
        "webpki::san::mismatch-domain-san": .peerName,
        "webpki::san::mismatch-subdomain-san": .peerName,
        "webpki::san::mismatch-subdomain-apex-san": .peerName,
        "webpki::san::mismatch-apex-subdomain-san": .peerName,
        "webpki::san::public-suffix-wildcard-san": .peerName,
        "webpki::san::public-suffix-multi-label-wildcard-san": .peerName,
        "webpki::san::public-suffix-private-namespace-wildcard-san": .peerName,
        "webpki::san::wildcard-embedded-leftmost-san": .peerName,
        "webpki::san::wildcard-not-in-leftmost-san": .peerName,
        "webpki::san::wildcard-match-across-labels-san": .peerName,
        "webpki::san::wildcard-embedded-ulabel-san": .peerName,
        "webpki::san::unicode-emoji-san": .peerName,
        "webpki::san::no-san": .peerName,
        "webpki::san::san-wildcard-only": .peerName,
        "webpki::san::san-wildcard-only-tld": .peerName,
        "webpki::cn::ipv4-hex-mismatch": .peerName,
        "webpki::cn::ipv4-leading-zeros-mismatch": .peerName,
        "webpki::cn::ipv6-uppercase-mismatch": .peerName,
        "webpki::cn::ipv6-uncompressed-mismatch": .peerName,
        "webpki::cn::ipv6-non-rfc5952-mismatch": .peerName,
        "webpki::cn::punycode-not-in-san": .peerName,
        "webpki::cn::utf8-vs-punycode-mismatch": .peerName,
        "webpki::cn::not-in-san": .peerName,
        "webpki::cn::case-mismatch": .peerName,
        "rfc5280::san::malformed": .peerName,  // SAN not DER: the public verify finds no SPIFFE ID in it
        "rfc5280::san::underscore-dns": .peerName,
        "rfc5280::san::ip-in-dns": .peerName,

        "rfc5280::aki::leaf-missing-aki": .caProfile,
        "rfc5280::aki::intermediate-missing-aki": .caProfile,
        "rfc5280::aki::cross-signed-root-missing-aki": .caProfile,
        "rfc5280::ski::root-missing-ski": .caProfile,
        "rfc5280::ski::intermediate-missing-ski": .caProfile,
        "rfc5280::serial::too-long": .caProfile,
        "rfc5280::serial::zero": .caProfile,
        "rfc5280::san::noncritical-with-empty-subject": .caProfile,
        "rfc5280::nc::not-allowed-in-ee-noncritical": .caProfile,
        "rfc5280::nc::not-allowed-in-ee-critical": .caProfile,
        "rfc5280::nc::permitted-dns-match-noncritical": .caProfile,  // conflicts with webpki::nc::permitted-dns-match-noncritical, which passes
        "rfc5280::pc::ica-noncritical-pc": .caProfile,
        "rfc5280::ca-empty-subject": .caProfile,
        "rfc5280::root-non-critical-basic-constraints": .caProfile,
        "webpki::nc::intermediate-permitted-excluded-subtrees-both-empty-sequences": .caProfile,

        "webpki::aki::root-with-aki-missing-keyidentifier": .webPKI,
        "webpki::aki::root-with-aki-authoritycertissuer": .webPKI,
        "webpki::aki::root-with-aki-authoritycertserialnumber": .webPKI,
        "webpki::aki::root-with-aki-all-fields": .webPKI,
        "webpki::aki::root-with-aki-ski-mismatch": .webPKI,
        "webpki::eku::ee-anyeku": .webPKI,
        "webpki::eku::ee-critical-eku": .webPKI,
        "webpki::eku::root-has-eku": .webPKI,
        "webpki::san::san-critical-with-nonempty-subject": .webPKI,
        "webpki::malformed-aia": .webPKI,
        "webpki::forbidden-rsa-not-divisible-by-8-in-root": .webPKI,
        "webpki::forbidden-rsa-key-not-divisible-by-8-in-leaf": .webPKI,

        "rfc5280::ca-as-leaf": .caAsLeaf,
        "pathlen::validation-ignores-pathlen-in-leaf": .caAsLeaf,
        "rfc5280::eku::ee-without-eku": .ekuRequired,

        "rfc5280::nc::permitted-dn-match": .nameConstraintFormUnsupported,
        "rfc5280::nc::nc-permits-email-exact": .nameConstraintFormUnsupported,
        "rfc5280::nc::nc-permits-email-domain": .nameConstraintFormUnsupported,
        "rfc5280::nc::nc-permits-email-literal-asterisk-exact-match": .nameConstraintFormUnsupported,
        "rfc5280::nc::nc-permits-email-literal-double-asterisk": .nameConstraintFormUnsupported,
        "rfc5280::nc::nc-permits-email-literal-mid-asterisk": .nameConstraintFormUnsupported,
        "rfc5280::nc::nc-forbids-othername-noop": .nameConstraintFormUnsupported,
        "rfc5280::nc::permitted-self-issued": .nameConstraintsOnSelfIssued,
        "cve::cve-2025-61727": .nameConstraintsLenient,
        "rfc5280::nc::nc-forbids-dnsname-wildcard-san": .nameConstraintsLenient,
        "rfc5280::nc::invalid-dnsname-leading-period": .nameConstraintsLenient,

        "crl::crlnumber-missing": .crlProfile,
        "crl::crlnumber-critical": .crlProfile,
        "crl::issuer-missing-crlsign": .crlProfile,

        "pathlen::max-chain-depth-0-exhausted": .maxChainDepth,
        "pathlen::max-chain-depth-1-exhausted": .maxChainDepth,
        "cve::cve-2024-0567": .intermediateCap,  // 9 intermediates
        "pathological::nc-dos-3": .nameConstraintsDoS,
    ]

    /// Cases not run, and why.
    static let notRun: [String: String] = [
        "pathological::nc-dos-1": "30 s in swift-certificates' name-constraint check (2048 constraints in a trusted root against 2048 SANs and 2048 subject names); accepted, like nc-dos-3",
        "pathological::nc-dos-2": "30 s, as nc-dos-1 (2048 SANs); accepted, like nc-dos-3",
    ]

    struct Case {
        let id: String
        let expectSuccess: Bool
        let role: PeerVerifier.Role
        let validationTime: Date?
        let trusted: [String]
        let intermediates: [String]
        let peer: String
        let crls: [String]
    }

    static func cases() throws -> [Case] {
        let document = try Fixtures.json("limbo/limbo.json")
        guard document["version"] as? Int == 1, let testcases = document["testcases"] as? [[String: Any]] else {
            throw FixtureError("limbo.json: not a version-1 limbo document")
        }
        return try testcases.map { t in
            guard let id = t["id"] as? String, let peer = t["peer_certificate"] as? String,
                let kind = t["validation_kind"] as? String, kind == "SERVER" || kind == "CLIENT",
                let expected = t["expected_result"] as? String, expected == "SUCCESS" || expected == "FAILURE"
            else { throw FixtureError("limbo.json: a testcase lacks id, peer_certificate, validation_kind or expected_result") }
            return Case(
                id: id, expectSuccess: expected == "SUCCESS", role: kind == "CLIENT" ? .client : .server,
                validationTime: try (t["validation_time"] as? String).map(Self.date),
                trusted: t["trusted_certs"] as? [String] ?? [], intermediates: t["untrusted_intermediates"] as? [String] ?? [],
                peer: peer, crls: t["crls"] as? [String] ?? [])
        }
    }

    /// RFC 3339 with an optional fraction (`2024-03-01T00:00:00.999+00:00`).
    static func date(_ text: String) throws -> Date {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = text.contains(".") ? [.withInternetDateTime, .withFractionalSeconds] : [.withInternetDateTime]
        guard let date = formatter.date(from: text) else { throw FixtureError("limbo.json: bad validation_time \(text)") }
        return date
    }

    /// PeerVerifier's verdict on one case. A certificate that does not parse fails the case, as
    /// in ``PeerVerifier/verify(derChain:role:)``.
    static func verdict(_ c: Case) async -> Verdict {
        let roots: [Certificate], intermediates: [Certificate], leaf: Certificate
        do {
            roots = try c.trusted.map { try Certificate(pemEncoded: $0) }
        } catch {
            return .failure("a trusted certificate does not parse: \(error)")
        }
        do {
            leaf = try Certificate(pemEncoded: c.peer)
            intermediates = try c.intermediates.map { try Certificate(pemEncoded: $0) }
        } catch {
            return .failure("a presented certificate does not parse: \(error)")
        }
        var lists: [RevocationList?] = []
        for crl in c.crls {
            var list: RevocationList?
            var reason = "no certificate in the case issued it"
            for issuer in roots + intermediates where list == nil {
                do { list = try RevocationList(Array(crl.utf8), issuer: issuer) } catch { reason = error.message }
            }
            guard let list else { return .failure("the CRL is refused: \(reason)") }
            lists.append(list)
        }
        let clock = c.validationTime.map { VerificationClock.fixed($0.timeIntervalSince1970) } ?? .system
        for list in lists.isEmpty ? [nil] : lists {
            let verifier = PeerVerifier(roots: roots, revocations: list, clock: clock)
            do {
                let result = try await verifier.validate(leaf: leaf, intermediates: intermediates, role: c.role, requireSPIFFEID: false)
                if case .couldNotValidate(let failures) = result {
                    let reasons = failures.map { "\($0.policyFailureReason)" }
                    return .failure(reasons.isEmpty ? "no chain to a trusted root" : reasons.joined(separator: "; "))
                }
            } catch {
                return .failure(error.message)
            }
        }
        return .success
    }

    @Test func limboPathValidation() async throws {
        let cases = try Self.cases()
        #expect(cases.count == 208)
        let ids = Set(cases.map(\.id))
        #expect(ids.count == cases.count, "duplicate testcase ids")
        for id in Set(Self.deviations.keys).union(Self.notRun.keys) where !ids.contains(id) {
            Issue.record("\(id) is listed but not in limbo.json")
        }
        #expect(Set(Self.deviations.keys).isDisjoint(with: Self.notRun.keys))

        var failures: [String] = []
        var run = 0, asExpected = 0
        var byReason: [Why: Int] = [:]
        for c in cases where Self.notRun[c.id] == nil {
            run += 1
            let verdict = await Self.verdict(c)
            let upstream = c.expectSuccess ? "SUCCESS" : "FAILURE"
            guard let why = Self.deviations[c.id] else {
                if verdict.succeeded == c.expectSuccess {
                    asExpected += 1
                } else {
                    failures.append("\(c.id): limbo expects \(upstream), PeerVerifier gives \(verdict)")
                }
                continue
            }
            byReason[why, default: 0] += 1
            let holds: Bool
            switch (verdict, why.refusal) {
            case (.success, nil): holds = true
            case (.failure(let reason), let fragments?): holds = fragments.contains { reason.contains($0) }
            default: holds = false
            }
            if verdict.succeeded == c.expectSuccess || !holds {
                failures.append("\(c.id): listed as deviation \(why) but PeerVerifier now gives \(verdict) (limbo: \(upstream)); update the list")
            }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        if failures.isEmpty { #expect(asExpected + byReason.values.reduce(0, +) == run) }
        let reasons = Why.allCases.compactMap { why in byReason[why].map { "\(why) \($0)" } }.joined(separator: ", ")
        print("x509-limbo: \(cases.count) cases, \(run) run, \(asExpected) as limbo expects; deviations: \(reasons); not run: \(Self.notRun.count)")
    }
}
