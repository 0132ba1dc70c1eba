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
        forEachJSONMember { name, value in object[name] = value }
        return .object(object)
    }

    /// ``jsonValue``'s text written by `writer` (compact, members sorted by name): the same bytes
    /// as `jsonValue.compactBytes`, without the dictionary. `spiffeID`: ``spiffeID``, when the
    /// caller has it already.
    public func writeJSON(into writer: inout JSONObjectWriter, spiffeID: String? = nil) {
        forEachJSONMember(spiffeID: spiffeID) { name, value in writer.add(name, value) }
    }

    /// Each member of ``jsonValue``, sorted by name (what `JSONObjectWriter` needs). The one
    /// definition of the identity's JSON: both forms come from it.
    private func forEachJSONMember(spiffeID: String? = nil, _ member: (String, JSONValue) -> Void) {
        member("account", .string(accountUID))
        if let authenticationContext { member("acr", .string(authenticationContext)) }
        member("expiresAt", .string(ISO8601Text.string(expiresAt)))
        member("factors", .array(factors.map { factor in
            var entry: [String: JSONValue] = ["method": .string(factor.method)]
            if let at = factor.signedInAt { entry["signedInAt"] = .string(ISO8601Text.string(at)) }
            return .object(entry)
        }))
        if let issuedAt { member("issuedAt", .string(ISO8601Text.string(issuedAt))) }
        member("issuer", .string(issuer))
        if let displayName { member("name", .string(displayName)) }
        if !permissions.isEmpty { member("permissions", .array(permissions.map { .string($0) })) }
        member("profile", .object(profile.mapValues { .string($0) }))
        member("provider", .string(provider))
        member("providerUID", .string(providerUID))
        member("spiffeID", .string(spiffeID ?? self.spiffeID))
    }
}
