public import TokenKit
import Foundation

extension PeerIdentity {
    /// The identity as JSON, the one form every path shows it in (the webhook's `userInfo`, the
    /// certificate reply, `tokentool verify --json`): `account`, `provider`, `providerUID`,
    /// `issuer`, `spiffeID`, `name`, `profile`, `factors` (`method`, `signedInAt`), `acr`,
    /// `issuedAt`, `expiresAt`, `permissions`; times in ISO 8601, absent members left out.
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "account": .string(accountUID), "provider": .string(provider), "providerUID": .string(providerUID),
            "issuer": .string(issuer), "spiffeID": .string(spiffeID), "expiresAt": .string(ISO8601Text.string(expiresAt)),
            "profile": .object(profile.mapValues { .string($0) }),
            "factors": .array(factors.map { factor in
                var entry: [String: JSONValue] = ["method": .string(factor.method)]
                if let at = factor.signedInAt { entry["signedInAt"] = .string(ISO8601Text.string(at)) }
                return .object(entry)
            }),
        ]
        if let displayName { object["name"] = .string(displayName) }
        if let authenticationContext { object["acr"] = .string(authenticationContext) }
        if let issuedAt { object["issuedAt"] = .string(ISO8601Text.string(issuedAt)) }
        if !permissions.isEmpty { object["permissions"] = .array(permissions.map { .string($0) }) }
        return .object(object)
    }
}
