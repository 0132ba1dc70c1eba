/// A JWS protected header, checked: `alg` is a supported algorithm, member types are right, and
/// `crit` lists only extensions the verifier understands.
public struct JOSEHeader: Sendable {
    private let storage: JOSEHeaderStorage

    /// `alg`, exactly as a supported algorithm name.
    public var algorithm: JWTAlgorithm { storage.algorithm }
    /// `kid`, if present.
    public var keyID: String? { storage.keyID }
    /// `typ`, if present (e.g. `JWT`).
    public var type: String? { storage.type }
    /// `cty`, if present.
    public var contentType: String? { storage.contentType }
    /// `crit`, if present (every entry understood by the verifier that accepted it).
    public var critical: [String] { storage.critical }
    /// Every member of the header, as parsed.
    public var members: [String: JSONValue] { storage.members }

    /// Header parameters registered by RFC 7515 §4.1; `crit` must not list these.
    static let registered: Set<String> = ["alg", "jku", "jwk", "kid", "x5u", "x5c", "x5t", "x5t#S256", "typ", "cty", "crit"]

    init(members: [String: JSONValue], understoodCritical: Set<String>) throws(TokenError) {
        guard let algValue = members["alg"] else { throw TokenError(.invalidHeader, "the header has no \"alg\"") }
        guard case .string(let alg) = algValue else { throw TokenError(.invalidHeader, "the header's \"alg\" is not a string") }
        let algorithm = try JOSEHeader.algorithm(named: alg)
        let keyID = try JOSEHeader.optionalString(members, "kid")
        let type = try JOSEHeader.optionalString(members, "typ")
        let contentType = try JOSEHeader.optionalString(members, "cty")
        var critical: [String] = []
        if let b64 = members["b64"], b64 != .bool(true) {
            throw TokenError(.invalidHeader, "unencoded payloads (\"b64\": false, RFC 7797) are not supported")
        }
        if let crit = members["crit"] {
            guard case .array(let items) = crit, !items.isEmpty else {
                throw TokenError(.unsupportedCritical, "\"crit\" must be a non-empty array of names")
            }
            var names: [String] = []
            for item in items {
                guard case .string(let name) = item else { throw TokenError(.unsupportedCritical, "\"crit\" must list names as strings") }
                if JOSEHeader.registered.contains(name) {
                    throw TokenError(.unsupportedCritical, "\"crit\" must not list the registered parameter \"\(name)\"")
                }
                if names.contains(name) { throw TokenError(.unsupportedCritical, "\"crit\" lists \"\(JSONParser.printable(name))\" twice") }
                guard understoodCritical.contains(name) else {
                    throw TokenError(.unsupportedCritical, "critical extension \"\(JSONParser.printable(name))\" is not understood")
                }
                guard members[name] != nil else {
                    throw TokenError(.unsupportedCritical, "critical extension \"\(JSONParser.printable(name))\" is listed but absent")
                }
                names.append(name)
            }
            critical = names
        }
        storage = JOSEHeaderStorage(algorithm: algorithm, keyID: keyID, type: type, contentType: contentType, critical: critical, members: members)
    }

    /// Maps an `alg` value to an algorithm: exact, case-sensitive names only; `none` in any
    /// spelling is forbidden.
    static func algorithm(named alg: String) throws(TokenError) -> JWTAlgorithm {
        if let algorithm = JWTAlgorithm(rawValue: alg) { return algorithm }
        let printable = JSONParser.printable(alg)
        if alg.lowercased().trimmingSpaces() == "none" {
            throw TokenError(.forbiddenAlgorithm, "alg \"\(printable)\" (unsecured JWS) is never accepted")
        }
        if JWTAlgorithm.allCases.contains(where: { $0.rawValue.lowercased() == alg.lowercased() }) {
            throw TokenError(.unsupportedAlgorithm, "alg \"\(printable)\" is not accepted: algorithm names are case-sensitive")
        }
        throw TokenError(.unsupportedAlgorithm, "alg \"\(printable)\" is not supported")
    }

    static func optionalString(_ members: [String: JSONValue], _ name: String) throws(TokenError) -> String? {
        guard let value = members[name] else { return nil }
        guard case .string(let s) = value else { throw TokenError(.invalidHeader, "the header's \"\(name)\" is not a string") }
        return s
    }
}

extension String {
    func trimmingSpaces() -> String {
        var scalars = Array(unicodeScalars)
        while let first = scalars.first, first == " " || first == "\t" { scalars.removeFirst() }
        while let last = scalars.last, last == " " || last == "\t" { scalars.removeLast() }
        var out = String.UnicodeScalarView()
        out.append(contentsOf: scalars)
        return String(out)
    }
}

/// One immutable object holds the fields, so a header (shared by a verifier's header cache
/// and every token it verifies) copies with one reference-count operation.
final class JOSEHeaderStorage: Sendable {
    let algorithm: JWTAlgorithm
    let keyID: String?
    let type: String?
    let contentType: String?
    let critical: [String]
    let members: [String: JSONValue]

    init(algorithm: JWTAlgorithm, keyID: String?, type: String?, contentType: String?, critical: [String], members: [String: JSONValue]) {
        self.algorithm = algorithm
        self.keyID = keyID
        self.type = type
        self.contentType = contentType
        self.critical = critical
        self.members = members
    }
}

