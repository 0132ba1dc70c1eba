import TokenKit

/// The configuration of Ditto's sample authentication webhook (`getditto/sample-authentication-permissions`,
/// `server/configurable/config.json`, as its `config_schema.json` describes it), read as it is, so
/// a team moves from that webhook to a provider's `dittoRules` with its own file:
///
/// - `permissions`: keys `path.to.claim.value` → a permission set `{"read": "*" | {collection:
///   [query]}, "write": …, "remoteQuery"?: Bool}`. Every rule whose claim has that value applies;
///   several are merged (everything wins; query arrays united, none twice; `remoteQuery` if any
///   says so). A token no rule matches is authenticated with no access. A claim that is an array
///   matches a rule for any of its strings.
/// - `userIDField`: the claim path of the `userID` (default `sub`).
/// - `defaultExpirationSeconds`: when stated, a token without `exp` is accepted for that long.
/// - `clientInfo`, `identityServiceMetadata`: a static object, or a list of claim paths whose
///   values are gathered (an object's members merged in; another value under the path's last name).
///
/// `JWTSecret` is refused: keys are the provider's business (its `type`, `secretFile`, …), and a
/// token is never read unverified.
struct DittoRules: Sendable {
    struct Rule: Sendable {
        let key: String
        let claimPath: String
        let value: String
        let permissions: DittoPermissions
    }

    /// A static object, or claim paths to gather.
    enum Extract: Sendable {
        case fixed([String: JSONValue])
        case paths([String])
    }

    let rules: [Rule]
    let userIDField: String
    let defaultExpirationSeconds: Int?
    let clientInfo: Extract?
    let identityServiceMetadata: Extract?

    /// What is wrong with the file: `key` is its member (empty for the whole file).
    struct Problem: Error {
        let key: String
        let message: String
        init(_ key: String, _ message: String) {
            self.key = key
            self.message = message
        }
    }

    static func parse(_ bytes: [UInt8]) throws(Problem) -> DittoRules {
        let value: JSONValue
        do { value = try JSONValue.parse(bytes) } catch { throw Problem("", "is not JSON: \(error.message.prefix(200))") }
        guard case .object(let top) = value else { throw Problem("", "must be a JSON object (the sample webhook's config.json)") }
        let known = ["$schema", "permissions", "userIDField", "defaultExpirationSeconds", "clientInfo", "identityServiceMetadata"]
        for name in top.keys.sorted() where !known.contains(name) {
            switch name {
            case "JWTSecret":
                throw Problem(name, "is not read: the provider verifies tokens with its own keys (type, secretFile, keyFile, url…); remove it")
            case "roles", "claims":
                throw Problem(name, "is an earlier format of the sample; state \"permissions\" with keys path.to.claim.value")
            case "expirationField":
                throw Problem(name, "is not supported: a token's expiry is its \"exp\"")
            default:
                throw Problem(name, "is not a key of Ditto's sample webhook configuration (\(known.dropFirst().joined(separator: ", ")))")
            }
        }
        var userIDField = "sub"
        if let given = top["userIDField"] {
            guard let text = given.stringValue, !text.isEmpty else { throw Problem("userIDField", "must be a non-empty claim path") }
            userIDField = text
        }
        var defaultExpiration: Int?
        if let given = top["defaultExpirationSeconds"] {
            guard let seconds = given.doubleValue, seconds >= 1, seconds <= 30 * 86_400, seconds == seconds.rounded() else {
                throw Problem("defaultExpirationSeconds", "must be a whole number of seconds, 1 to 2592000")
            }
            defaultExpiration = Int(seconds)
        }
        guard case .object(let table)? = top["permissions"], !table.isEmpty else {
            throw Problem(
                "permissions",
                "must map at least one path.to.claim.value to a permission set (the sample grants everything to every token when it has none; here a grant is stated)")
        }
        var rules: [Rule] = []
        for key in table.keys.sorted() {
            guard let dot = key.lastIndex(of: "."), dot != key.startIndex, key.index(after: dot) != key.endIndex else {
                throw Problem("permissions.\(key.prefix(80))", "must be named path.to.claim.value (a claim path, a dot, the value)")
            }
            let permissions: DittoPermissions
            do throws(DittoPermissions.ShapeError) { permissions = try Self.permissionSet(table[key] ?? .null) } catch {
                throw Problem("permissions.\(key.prefix(80))", error.message)
            }
            rules.append(Rule(key: key, claimPath: String(key[..<dot]), value: String(key[key.index(after: dot)...]), permissions: permissions))
        }
        return DittoRules(
            rules: rules, userIDField: userIDField, defaultExpirationSeconds: defaultExpiration,
            clientInfo: try extract(top["clientInfo"], "clientInfo"), identityServiceMetadata: try extract(top["identityServiceMetadata"], "identityServiceMetadata"))
    }

    /// A permission set of the sample: `read`/`write` each `"*"` or `{collection: [query]}`.
    static func permissionSet(_ value: JSONValue) throws(DittoPermissions.ShapeError) -> DittoPermissions {
        guard case .object(let set) = value else { throw .init("must be an object {read, write, remoteQuery?}") }
        if let extra = set.keys.sorted().first(where: { !["read", "write", "remoteQuery"].contains($0) }) {
            throw .init("has an unknown member \"\(extra.prefix(40))\"")
        }
        func side(_ name: String) throws(DittoPermissions.ShapeError) -> DittoPermissions.Side {
            switch set[name] {
            case .string("*")?: return DittoPermissions.Side(everything: true, queriesByCollection: [:])
            case nil, .null?: return .nothing
            case .object(let byCollection)?:
                return DittoPermissions.Side(everything: false, queriesByCollection: try DittoPermissions.queries(byCollection, name))
            default: throw .init("needs \"\(name)\" as \"*\" or an object mapping collections to arrays of queries")
            }
        }
        var remoteQuery = false
        switch set["remoteQuery"] {
        case nil, .null?: break
        case .bool(let value)?: remoteQuery = value
        default: throw .init("needs \"remoteQuery\" as a boolean")
        }
        return DittoPermissions(read: try side("read"), write: try side("write"), remoteQuery: remoteQuery)
    }

    static func extract(_ value: JSONValue?, _ key: String) throws(Problem) -> Extract? {
        switch value {
        case nil, .null?: return nil
        case .object(let members)?: return .fixed(members)
        case .array(let items)?:
            var paths: [String] = []
            for item in items {
                guard let path = item.stringValue, !path.isEmpty else { throw Problem(key, "must be an object, or an array of claim paths") }
                paths.append(path)
            }
            return .paths(paths)
        default: throw Problem(key, "must be an object, or an array of claim paths")
        }
    }

    /// The permissions the token's claims earn: every matching rule's, merged.
    func permissions(for claims: [String: JSONValue]) -> DittoPermissions {
        var read = DittoPermissions.Side.nothing
        var write = DittoPermissions.Side.nothing
        var remoteQuery = false
        for rule in rules where Self.matches(JSONValue.value(atPath: rule.claimPath, in: claims), rule.value) {
            read = read.merged(with: rule.permissions.read)
            write = write.merged(with: rule.permissions.write)
            remoteQuery = remoteQuery || (rule.permissions.remoteQuery ?? false)
        }
        return DittoPermissions(read: read, write: write, remoteQuery: remoteQuery)
    }

    /// Whether a claim's value is the rule's value: a string itself, a number's or a boolean's
    /// JSON text, or any string of an array.
    static func matches(_ claim: JSONValue?, _ value: String) -> Bool {
        switch claim {
        case .string(let text)?: return text == value
        case .number(let text)?: return text == value
        case .bool(let flag)?: return (flag ? "true" : "false") == value
        case .array(let items)?: return items.contains { $0.stringValue == value }
        default: return false
        }
    }

    /// `clientInfo` or `identityServiceMetadata` for a token, nil when not configured.
    static func gathered(_ extract: Extract?, from claims: [String: JSONValue]) -> JSONValue? {
        switch extract {
        case nil: return nil
        case .fixed(let members)?: return .object(members)
        case .paths(let paths)?:
            var out: [String: JSONValue] = [:]
            for path in paths {
                switch JSONValue.value(atPath: path, in: claims) {
                case nil: continue
                case .object(let members)?: out.merge(members) { $1 }
                case let value?: out[path.split(separator: ".").last.map(String.init) ?? path] = value
                }
            }
            return .object(out)
        }
    }
}
