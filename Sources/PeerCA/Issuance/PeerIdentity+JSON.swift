public import TokenKit
import Foundation

extension PeerIdentity {
    /// The identity as JSON, the one form every path shows it in (the webhook's `userInfo`, the
    /// certificate reply, `tokentool verify --json`): `account`, `provider`, `providerUID`,
    /// `issuer`, `spiffeID`, `name`, `profile`, `factors` (`method`, `signedInAt`), `acr`,
    /// `issuedAt`, `expiresAt`, `permissions`; times in ISO 8601, absent members left out.
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [:]
        object.reserveCapacity(12)
        forEachJSONMember { name, value in
            switch value {
            case .string(let text): object[name] = .string(text)
            case .date(let date): object[name] = .string(ISO8601Text.string(date))
            case .strings(let texts): object[name] = .array(texts.map { .string($0) })
            case .factors(let factors):
                object[name] = .array(factors.map { factor in
                    var entry: [String: JSONValue] = ["method": .string(factor.method)]
                    if let at = factor.signedInAt { entry["signedInAt"] = .string(ISO8601Text.string(at)) }
                    return .object(entry)
                })
            case .profile(let profile): object[name] = .object(profile.mapValues { .string($0) })
            }
        }
        return .object(object)
    }

    /// ``jsonValue``'s text written by `writer` (compact, members sorted by name): the same bytes
    /// as `jsonValue.compactBytes`, written straight from the identity (no `JSONValue`, no
    /// dictionary: a certificate reply's identity cost ≈ 2 µs that way, its factors and profile
    /// as dictionaries hashed and sorted). `spiffeID`: ``spiffeID``, when the caller has it already.
    public func writeJSON(into writer: inout JSONObjectWriter, spiffeID: String? = nil) {
        forEachJSONMember(spiffeID: spiffeID) { name, value in
            switch value {
            case .string(let text): writer.add(name, string: text)
            case .date(let date): writer.add(name) { ISO8601Text.append(date, to: &$0) }
            case .strings(let texts):
                var array: [UInt8] = []
                JSONWriter.writeStrings(texts, into: &array)
                writer.add(name, json: array)
            case .factors(let factors):
                var array: [UInt8] = [0x5b]
                for (index, factor) in factors.enumerated() {
                    if index > 0 { array.append(0x2c) }
                    var entry = JSONObjectWriter(capacity: 64)
                    entry.add("method", string: factor.method)
                    if let at = factor.signedInAt { entry.add("signedInAt") { ISO8601Text.append(at, to: &$0) } }
                    array += entry.finished()
                }
                array.append(0x5d)
                writer.add(name, json: array)
            case .profile(let profile):
                var object = JSONObjectWriter(capacity: 128)
                for (key, text) in profile.sorted(by: { $0.key < $1.key }) { object.add(key, string: text) }
                writer.add(name, object: object)
            }
        }
    }

    /// A member's value, as ``forEachJSONMember(spiffeID:_:)`` gives it: each form writes it its way.
    private enum MemberValue {
        case string(String)
        case date(Date)
        case strings([String])
        case factors([AuthenticationFactor])
        case profile([String: String])
    }

    /// Each member of ``jsonValue``, sorted by name (what `JSONObjectWriter` needs). The one
    /// definition of the identity's JSON: both forms come from it.
    private func forEachJSONMember(spiffeID: String? = nil, _ member: (String, MemberValue) -> Void) {
        member("account", .string(accountUID))
        if let authenticationContext { member("acr", .string(authenticationContext)) }
        member("expiresAt", .date(expiresAt))
        member("factors", .factors(factors))
        if let issuedAt { member("issuedAt", .date(issuedAt)) }
        member("issuer", .string(issuer))
        if let displayName { member("name", .string(displayName)) }
        if !permissions.isEmpty { member("permissions", .strings(permissions)) }
        member("profile", .profile(profile))
        member("provider", .string(provider))
        member("providerUID", .string(providerUID))
        member("spiffeID", .string(spiffeID ?? self.spiffeID))
    }
}
