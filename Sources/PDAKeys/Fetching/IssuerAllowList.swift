/// Which issuer hosts may have their keys fetched: a list of DNS suffixes.
///
/// The token's `iss` is read *before* its signature is checked, so it is attacker-controlled
/// input that decides where we send a request. ``host(forIssuer:)`` therefore accepts only a plain
/// DNS host name (letters, digits, hyphens and dots; no scheme, userinfo, port, path, IP literal
/// or trailing dot) that ends with one of the suffixes, and is checked before any request.
///
/// A suffix that starts with a dot (`.hubat.net`) matches sub-domains only; one without
/// (`pda.example.org`) matches that name and its sub-domains.
///
/// ```swift
/// let hat = IssuerAllowList.hat   // .hubat.net, .hubofallthings.net, .hat.direct
/// let host = try hat.host(forIssuer: "postman.hubat.net")   // "postman.hubat.net"
/// ```
public struct IssuerAllowList: Sendable, Hashable {
    /// The accepted suffixes, lower-cased.
    public let suffixes: [String]

    /// HAT's public PDA domains: `.hubat.net`, `.hubofallthings.net` and `.hat.direct`.
    public static let hat = IssuerAllowList(uncheckedSuffixes: [".hubat.net", ".hubofallthings.net", ".hat.direct"])

    /// An allow-list of DNS suffixes. Each must itself be a valid host name (optionally with a
    /// leading dot); an empty list is refused, since it would allow nothing.
    public init(suffixes: [String]) throws(KeySourceError) {
        guard !suffixes.isEmpty else {
            throw KeySourceError(.invalidIssuer, "an issuer allow-list needs at least one suffix")
        }
        var normalised: [String] = []
        for suffix in suffixes {
            let lower = suffix.lowercased()
            let name = lower.hasPrefix(".") ? String(lower.dropFirst()) : lower
            guard IssuerAllowList.isHostName(name), name.contains(".") else {
                throw KeySourceError(.invalidIssuer, "allow-list entry \"\(IssuerAllowList.printable(suffix))\" is not a DNS suffix with at least two labels")
            }
            normalised.append(lower)
        }
        self.suffixes = normalised
    }

    private init(uncheckedSuffixes: [String]) { self.suffixes = uncheckedSuffixes }

    /// The host named by an `iss` value, if it is a plain DNS name on the list; else a typed error.
    public func host(forIssuer issuer: String) throws(KeySourceError) -> String {
        let host = try IssuerAllowList.plainHost(issuer)
        guard allows(host) else {
            throw KeySourceError(.issuerNotAllowed, "issuer host \"\(host)\" is not under an allowed suffix (\(suffixes.joined(separator: ", ")))")
        }
        return host
    }

    /// Whether a (valid, lower-case) host name is on the list.
    public func allows(_ host: String) -> Bool {
        suffixes.contains { suffix in
            if suffix.hasPrefix(".") { return host.hasSuffix(suffix) && host.count > suffix.count }
            return host == suffix || host.hasSuffix("." + suffix)
        }
    }

    /// Checks that `issuer` is a bare DNS host name and returns it lower-cased.
    static func plainHost(_ issuer: String) throws(KeySourceError) -> String {
        let shown = printable(issuer)
        if issuer.isEmpty { throw KeySourceError(.invalidIssuer, "the token's iss is empty") }
        if issuer.contains("://") { throw KeySourceError(.invalidIssuer, "iss \"\(shown)\" has a scheme; a PDA issuer is a bare host name") }
        if issuer.contains("@") { throw KeySourceError(.invalidIssuer, "iss \"\(shown)\" has userinfo") }
        if issuer.contains("/") || issuer.contains("?") || issuer.contains("#") {
            throw KeySourceError(.invalidIssuer, "iss \"\(shown)\" has a path, query or fragment")
        }
        if issuer.contains(":") || issuer.contains("[") { throw KeySourceError(.invalidIssuer, "iss \"\(shown)\" has a port or is an IPv6 literal") }
        let host = issuer.lowercased()
        guard isHostName(host) else {
            throw KeySourceError(.invalidIssuer, "iss \"\(shown)\" is not a DNS host name (letters, digits, hyphens; labels of 1-63 characters; no trailing dot)")
        }
        guard host.contains(".") else { throw KeySourceError(.invalidIssuer, "iss \"\(shown)\" is a single-label name") }
        if host.split(separator: ".").last.map({ $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }) ?? false {
            throw KeySourceError(.invalidIssuer, "iss \"\(shown)\" is an IP address; a PDA issuer is a DNS name")
        }
        return host
    }

    /// RFC 1123 host name: labels of 1–63 ASCII letters, digits and hyphens, not starting or
    /// ending with a hyphen; at most 253 characters.
    static func isHostName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= 253 else { return false }
        for label in bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false) {
            guard (1...63).contains(label.count), label.first != UInt8(ascii: "-"), label.last != UInt8(ascii: "-") else { return false }
            for byte in label {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"):
                    continue
                default: return false
                }
            }
        }
        return true
    }

    /// A value safe to echo in a message: printable ASCII, at most 80 characters.
    static func printable(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(80) {
            out += (0x20..<0x7f).contains(scalar.value) && scalar != "\"" && scalar != "\\" ? String(scalar) : "\\u{\(String(scalar.value, radix: 16))}"
        }
        return text.unicodeScalars.count > 80 ? out + "…" : out
    }
}
