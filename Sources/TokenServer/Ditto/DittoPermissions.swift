import TokenKit

/// Ditto's permissions: `{"read": P, "write": P, "remoteQuery"?: Bool}` with
/// `P = {"everything": Bool, "queriesByCollection": {collection: [Ditto query]}}` ("Each value is
/// an array of Ditto queries"). What the webhook answers, and what a peer certificate carries.
struct DittoPermissions: Sendable, Hashable {
    /// One side, read or write.
    struct Side: Sendable, Hashable {
        var everything: Bool
        /// Per collection its queries, in the order first given, none twice.
        var queriesByCollection: [String: [String]]

        static let nothing = Side(everything: false, queriesByCollection: [:])

        init(everything: Bool, queriesByCollection: [String: [String]]) {
            self.everything = everything
            self.queriesByCollection = queriesByCollection.mapValues(Self.unique)
        }

        /// Both sides' access (Ditto's sample webhook's `mergePermissions`): everything when either
        /// grants it (and then no queries); else per collection the union of the queries, the
        /// first side's first, none twice.
        func merged(with other: Side) -> Side {
            if everything || other.everything { return Side(everything: true, queriesByCollection: [:]) }
            var merged = queriesByCollection
            for (collection, queries) in other.queriesByCollection { merged[collection, default: []] += queries }
            return Side(everything: false, queriesByCollection: merged)
        }

        var json: JSONValue {
            .object(["everything": .bool(everything), "queriesByCollection": .object(queriesByCollection.mapValues { .array($0.map(JSONValue.string)) })])
        }

        static func unique(_ queries: [String]) -> [String] {
            var seen = Set<String>()
            return queries.filter { seen.insert($0).inserted }
        }
    }

    var read: Side
    var write: Side
    /// Whether remote queries are allowed; answered only when stated.
    var remoteQuery: Bool?

    static let nothing = DittoPermissions(read: .nothing, write: .nothing, remoteQuery: nil)

    init(read: Side, write: Side, remoteQuery: Bool?) {
        self.read = read
        self.write = write
        self.remoteQuery = remoteQuery
    }

    init(_ configured: ServerConfiguration.Permissions) {
        func side(_ p: ServerConfiguration.Permission) -> Side { Side(everything: p.everything, queriesByCollection: p.queriesByCollection) }
        self.init(read: side(configured.read), write: side(configured.write), remoteQuery: configured.remoteQuery)
    }

    /// The webhook's `permissions` member.
    var json: JSONValue {
        var object: [String: JSONValue] = ["read": read.json, "write": write.json]
        if let remoteQuery { object["remoteQuery"] = .bool(remoteQuery) }
        return .object(object)
    }

    /// The claim's value when it has Ditto's shape (nothing more, nothing less; a collection's
    /// single query string is read as a one-query array); a refusal naming what is wrong otherwise.
    static func validated(_ value: JSONValue, claim: String) throws(ServiceRefusal) -> DittoPermissions {
        do throws(ShapeError) { return try parse(value) } catch {
            throw ServiceRefusal("invalid_permissions", "the \"\(claim)\" claim \(error.message)")
        }
    }

    /// What is wrong with a value that should be Ditto's permissions (words that follow its name).
    struct ShapeError: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    static func parse(_ value: JSONValue) throws(ShapeError) -> DittoPermissions {
        guard case .object(let top) = value else { throw ShapeError("must be an object {read, write}") }
        if let extra = top.keys.sorted().first(where: { !["read", "write", "remoteQuery"].contains($0) }) {
            throw ShapeError("has an unknown member \"\(extra.prefix(40))\"")
        }
        func side(_ name: String) throws(ShapeError) -> Side {
            guard case .object(let permission)? = top[name] else { throw ShapeError("needs \"\(name)\" as an object") }
            if let extra = permission.keys.sorted().first(where: { $0 != "everything" && $0 != "queriesByCollection" }) {
                throw ShapeError("has an unknown member \"\(name).\(extra.prefix(40))\"")
            }
            guard case .bool(let everything)? = permission["everything"] else { throw ShapeError("needs \"\(name).everything\" as a boolean") }
            switch permission["queriesByCollection"] {
            case nil: return Side(everything: everything, queriesByCollection: [:])
            case .object(let byCollection)?: return Side(everything: everything, queriesByCollection: try queries(byCollection, "\(name).queriesByCollection"))
            default: throw ShapeError("needs \"\(name).queriesByCollection\" as an object")
            }
        }
        var remoteQuery: Bool?
        switch top["remoteQuery"] {
        case nil: break
        case .bool(let value)?: remoteQuery = value
        default: throw ShapeError("needs \"remoteQuery\" as a boolean")
        }
        return DittoPermissions(read: try side("read"), write: try side("write"), remoteQuery: remoteQuery)
    }

    /// `{collection: [query]}` (a single query string read as a one-query array).
    static func queries(_ byCollection: [String: JSONValue], _ name: String) throws(ShapeError) -> [String: [String]] {
        var out: [String: [String]] = [:]
        for (collection, value) in byCollection {
            guard !collection.isEmpty else { throw ShapeError("needs \"\(name)\" to name its collections (an empty name)") }
            switch value {
            case .string(let query): out[collection] = [query]
            case .array(let items):
                var list: [String] = []
                for item in items {
                    guard case .string(let query) = item else {
                        throw ShapeError("needs \"\(name).\(collection.prefix(40))\" as an array of Ditto query strings")
                    }
                    list.append(query)
                }
                out[collection] = list
            default: throw ShapeError("needs \"\(name).\(collection.prefix(40))\" as an array of Ditto query strings")
            }
        }
        return out
    }
}
