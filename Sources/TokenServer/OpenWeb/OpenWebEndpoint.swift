import Foundation
import Logging
import Metrics
import PeerCA
import TokenKit

extension TokenService {
    /// OpenWeb SSO (`POST /v1/sso/openweb`, `{provider, token, codeA}` → `{codeB}`): the app's
    /// backend vouches for its user. The token is verified with the named provider as on every
    /// other endpoint (identity, factor policy, ended sessions); then OpenWeb's `register-user` is
    /// called with `codeA`, the user's `primary_key` (the account UID, or `openweb.primaryKeyClaim`)
    /// and `user_name` (`openweb.userNameClaim`, default `name`) and the app's access token, and
    /// OpenWeb's codeB is the answer. Renewal (the SDK's `renewSSO`) is the same request with a
    /// new codeA.
    ///
    /// Nothing is sent to OpenWeb unless the request is well formed and the token accepted. 404
    /// `openweb_disabled` without an `openweb` configuration; 400/401/403 as on the other
    /// endpoints (and 403 `missing_claim`/`invalid_claim` for the user's fields); 502
    /// `upstream_refused` when OpenWeb answers without a codeB (its status and a short excerpt,
    /// never the access token); 503 `upstream_unavailable` when it cannot be had in time.
    public func openWebSSO(_ body: [UInt8]) async -> ServiceResponse {
        guard let openWeb else {
            countOpenWeb("disabled")
            return .error(404, "openweb_disabled", "no OpenWeb SSO is configured (openweb)")
        }
        let request: Request
        switch parse(body, needs: ["provider", "token", "codeA"]) {
        case .failure(let error):
            countOpenWeb("rejected")
            return error.response
        case .success(let parsed): request = parsed
        }
        if let extra = request.object.keys.first(where: { !["provider", "token", "codeA", "appID", "databaseID"].contains($0) }) {
            countOpenWeb("rejected")
            return .error(400, "invalid_request", "unknown member \"\(extra.prefix(40))\"")
        }
        let codeA = request.object["codeA"]?.stringValue ?? ""
        guard !codeA.isEmpty, codeA.utf8.count <= OpenWebSSO.maxCodeABytes, codeA.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            countOpenWeb("rejected")
            return .error(
                400, "invalid_request", "\"codeA\" must be 1 to \(OpenWebSSO.maxCodeABytes) printable ASCII characters without spaces (the SDK's codeA)")
        }
        let outcome: ProviderVerifier.Outcome
        switch await verifiedCallerOrError(request) {
        case .failure(let error):
            countOpenWeb("rejected")
            return error.response
        case .success(let verified): outcome = verified
        }
        let claims = outcome.token.payload
        let primaryKey: String
        let userName: String
        do throws(ServiceRefusal) {
            if let claim = openWeb.settings.primaryKeyClaim {
                primaryKey = try Self.userField(claims, claim: claim, as: "primary_key")
            } else {
                primaryKey = outcome.identity.accountUID
            }
            userName = try Self.userField(claims, claim: openWeb.settings.userNameClaim, as: "user_name")
        } catch {
            countOpenWeb("rejected")
            return .error(403, error.code, error.message)
        }
        let account = outcome.identity.accountUID
        switch await openWeb.registerUser(codeA: codeA, primaryKey: primaryKey, userName: userName) {
        case .codeB(let codeB):
            countOpenWeb("ok")
            logger.info("OpenWeb SSO: vouched", metadata: ["account": "\(account)", "provider": "\(request.providerName)"])
            return .json(200, .object(["codeB": .string(codeB)]))
        case .refused(let status, let reason, let excerpt):
            countOpenWeb("upstream_refused")
            logger.warning("OpenWeb SSO: OpenWeb refused", metadata: ["account": "\(account)", "status": "\(status)", "reason": "\(reason)"])
            var error: [String: JSONValue] = [
                "code": .string("upstream_refused"), "message": .string("OpenWeb refused the user: \(reason)"), "upstreamStatus": .integer(status),
            ]
            if !excerpt.isEmpty { error["upstreamExcerpt"] = .string(excerpt) }
            return .json(502, .object(["error": .object(error)]))
        case .unavailable(let reason):
            countOpenWeb("upstream_unavailable")
            logger.warning("OpenWeb SSO: OpenWeb unavailable", metadata: ["account": "\(account)", "reason": "\(reason)"])
            return .error(503, "upstream_unavailable", "OpenWeb cannot be reached now: \(reason)")
        }
    }

    /// A claim's value for one of OpenWeb's user fields: a string (or an integer) of 1 to
    /// ``OpenWebSSO/maxUserFieldBytes`` bytes without control characters. A token without it is
    /// refused (`missing_claim`), one with another value too (`invalid_claim`): never a default.
    static func userField(_ claims: [String: JSONValue], claim: String, as field: String) throws(ServiceRefusal) -> String {
        let text: String
        switch claims[claim] {
        case nil, .null?:
            throw ServiceRefusal("missing_claim", "the token has no \"\(claim.prefix(64))\" claim, which OpenWeb's \(field) comes from")
        case .string(let value)?: text = value
        case .number(let literal)? where Int(literal) != nil: text = literal
        default:
            throw ServiceRefusal("invalid_claim", "the \"\(claim.prefix(64))\" claim (OpenWeb's \(field)) must be a string")
        }
        guard !text.isEmpty, text.utf8.count <= OpenWebSSO.maxUserFieldBytes, !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw ServiceRefusal(
                "invalid_claim", "the \"\(claim.prefix(64))\" claim (OpenWeb's \(field)) must have 1 to \(OpenWebSSO.maxUserFieldBytes) bytes and no control characters")
        }
        return text
    }

    /// `tokenserver_openweb_requests_total{result}`: `ok`, `rejected` (nothing was sent to
    /// OpenWeb), `upstream_refused`, `upstream_unavailable`, `disabled`.
    func countOpenWeb(_ result: String) {
        counters.counter("tokenserver_openweb_requests_total", [("result", result)]).increment()
    }
}
