import Foundation
import TokenKit

/// SPIFFE ID helpers.
public enum SPIFFE {
    /// Whether `name` is a valid trust domain: lower-case letters, digits, `.`, `-`, `_`, 1-255 characters.
    public static func isTrustDomain(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 255
            && name.utf8.allSatisfy { (0x61...0x7a).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2e || $0 == 0x2d || $0 == 0x5f }
    }

    /// A path segment for `value`: as is when it has only SPIFFE's characters (letters, digits,
    /// `.`, `-`, `_`), is not `.` or `..`, and does not start with `_x`; otherwise `_x` + hex.
    public static func segment(_ value: String) -> String {
        let allowed = value.utf8.allSatisfy {
            (0x61...0x7a).contains($0) || (0x41...0x5a).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2e || $0 == 0x2d || $0 == 0x5f
        }
        // On the UTF-8 bytes: String's hasPrefix and == compare Characters (grapheme breaking).
        let bytes = value.utf8
        if allowed, !bytes.isEmpty, !bytes.elementsEqual(".".utf8), !bytes.elementsEqual("..".utf8), !bytes.starts(with: "_x".utf8) { return value }
        return "_x" + Hex.encode(value.utf8)
    }

    /// An issuer as a name: `https://` and a trailing `/` dropped (`https://idp.example/` → `idp.example`).
    static func issuerName(_ issuer: String) -> String {
        // On the UTF-8 bytes: Substring's hasPrefix/dropLast compare Characters (grapheme
        // breaking), a microsecond per issuance for two ASCII checks.
        var name = Substring(issuer).utf8
        if name.starts(with: "https://".utf8) { name = name.dropFirst(8) }
        while name.last == 0x2f { name = name.dropLast() }
        return String(Substring(name))
    }

    /// `spiffe://<trust domain>/<segment(issuer name)>/<segment(subject)>`.
    static func id(trustDomain: String, issuer: String, subject: String) -> String {
        let issuerSegment = segment(issuerName(issuer))
        let subjectSegment = segment(subject)
        var id = "spiffe://"
        id.reserveCapacity(11 + trustDomain.utf8.count + issuerSegment.utf8.count + subjectSegment.utf8.count)
        id += trustDomain
        id += "/"
        id += issuerSegment
        id += "/"
        id += subjectSegment
        return id
    }

    /// The parts of a SPIFFE ID: trust domain and path (without the leading `/`); nil for a URI
    /// that breaks the SPIFFE ID rules. The path is empty for a trust domain's own ID
    /// (`spiffe://td`); otherwise every segment has only letters, digits, `.`, `-` and `_`, and
    /// none is empty, `.` or `..` (no `%`-escapes, query, fragment or trailing `/`: a relying party
    /// that compares or normalises paths must not be able to read two names into one).
    public static func parse(_ uri: String) -> (trustDomain: String, path: String)? {
        guard uri.hasPrefix("spiffe://") else { return nil }
        let rest = uri.dropFirst(9)
        let domain = rest.prefix { $0 != "/" }
        guard isTrustDomain(String(domain)) else { return nil }
        let path = rest.dropFirst(domain.count)
        guard !path.isEmpty else { return (String(domain), "") }
        for segment in path.utf8.dropFirst().split(separator: 0x2f, omittingEmptySubsequences: false) {
            guard !segment.isEmpty, !segment.elementsEqual(".".utf8), !segment.elementsEqual("..".utf8),
                segment.allSatisfy({
                    (0x61...0x7a).contains($0) || (0x41...0x5a).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2e || $0 == 0x2d || $0 == 0x5f
                })
            else { return nil }
        }
        return (String(domain), String(path.dropFirst()))
    }
}
