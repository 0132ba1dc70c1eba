import Foundation

extension ServerConfiguration {
    /// OpenWeb single sign-on (`POST /v1/sso/openweb`): the service vouches for a user whose token
    /// it verified by calling OpenWeb's `register-user` with the app's secret access token.
    ///
    /// ```json
    /// "openweb": {
    ///   "baseURL": "https://www.spot.im/api",
    ///   "accessTokenFile": "/etc/tokentool/openweb.token",
    ///   "userNameClaim": "name",
    ///   "timeoutSeconds": 5
    /// }
    /// ```
    public struct OpenWeb: Sendable, Codable, Hashable {
        /// OpenWeb's API base; `register-user` is `{baseURL}/sso/v1/register-user`. HTTPS only
        /// (no userinfo, query or fragment).
        public var baseURL: String
        /// A file (mode 0600) whose content, less surrounding whitespace, is the SSO access token
        /// OpenWeb gave the app. Read at start; never logged, never in an answer.
        public var accessTokenFile: String
        /// The claim whose value is OpenWeb's `primary_key`. Default: none — the identity's account
        /// UID (`<provider>:<sub>` unless the provider's account rule says otherwise).
        public var primaryKeyClaim: String?
        /// The claim whose value is OpenWeb's `user_name`. Default `name`. A token without it is
        /// refused (`missing_claim`); there is no fallback.
        public var userNameClaim: String?
        /// Trust OpenWeb's HTTPS only when its certificate chains to this PEM file (private PKI,
        /// tests); the system trust store otherwise.
        public var caFile: String?
        /// Time allowed for the whole `register-user` call (connection, TLS, answer). Default 5 s;
        /// at most 60 and less than `limits.requestTimeoutSeconds`.
        public var timeoutSeconds: Double?

        public init(
            baseURL: String, accessTokenFile: String, primaryKeyClaim: String? = nil, userNameClaim: String? = nil, caFile: String? = nil,
            timeoutSeconds: Double? = nil
        ) {
            self.baseURL = baseURL
            self.accessTokenFile = accessTokenFile
            self.primaryKeyClaim = primaryKeyClaim
            self.userNameClaim = userNameClaim
            self.caFile = caFile
            self.timeoutSeconds = timeoutSeconds
        }

        /// The `timeoutSeconds` in force.
        var timeout: Double { timeoutSeconds ?? 5 }
        /// The `userNameClaim` in force.
        var userNameClaimName: String { userNameClaim ?? "name" }
    }

    /// The `openweb` section's checks (part of ``validate()``): an HTTPS base URL, a token file
    /// named, claim names not empty, a timeout within the request's.
    func validateOpenWeb() throws(ConfigurationError) {
        guard let openweb else { return }
        _ = try OpenWebSSO.registerUserURL(openweb.baseURL)
        guard !openweb.accessTokenFile.isEmpty else { throw ConfigurationError(key: "openweb.accessTokenFile", "must name a file") }
        if let claim = openweb.primaryKeyClaim, claim.isEmpty { throw ConfigurationError(key: "openweb.primaryKeyClaim", "must not be empty") }
        if let claim = openweb.userNameClaim, claim.isEmpty { throw ConfigurationError(key: "openweb.userNameClaim", "must not be empty") }
        if let caFile = openweb.caFile, caFile.isEmpty { throw ConfigurationError(key: "openweb.caFile", "must name a file") }
        let timeout = openweb.timeout
        guard timeout > 0, timeout <= 60 else { throw ConfigurationError(key: "openweb.timeoutSeconds", "must be more than 0 and at most 60") }
        guard timeout < requestTimeout else {
            throw ConfigurationError(
                key: "openweb.timeoutSeconds",
                "must be less than limits.requestTimeoutSeconds (\(requestTimeout)), so a slow OpenWeb is reported as upstream_unavailable")
        }
    }
}
