public import TokenKit

/// The one error the remote verifiers throw (``HATTokenVerifier``, ``RemoteJWTVerifier``,
/// ``TokenSourceVerifier``): the token was refused, or the issuer's keys could not be had.
///
/// The two cases call for different answers: an invalid token is the caller's fault (HTTP 401,
/// ask for a new token), keys that cannot be fetched are not (HTTP 503, try again later).
///
/// ```swift
/// do {
///     let identity = try await hat.verify(token)
///     print(identity.subject)
/// } catch {
///     switch error {
///     case .token(let refused) where refused.code == .expired: print("ask the client to refresh")
///     case .token(let refused): print("invalid token: \(refused.code)")
///     case .keys(let unavailable): print("the PDA's key cannot be had now (\(unavailable.code)); try later")
///     }
/// }
/// ```
public enum RemoteVerificationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The token is invalid: expired, bad signature, wrong issuer, … (a `TokenError`).
    case token(TokenError)
    /// The issuer's keys could not be had: not allowed, unreachable, not a usable key, …
    case keys(KeySourceError)

    /// The wrapped error's stable code (`"expired"`, `"bad_signature"`, `"connection"`, …).
    /// Both error types have an `issuer_mismatch`: switch on the case to tell them apart.
    public var code: String {
        switch self {
        case .token(let error): error.code.rawValue
        case .keys(let error): error.code.rawValue
        }
    }

    /// What was wrong, in words (the wrapped error's message).
    public var message: String {
        switch self {
        case .token(let error): error.message
        case .keys(let error): error.message
        }
    }

    /// The `TokenError` when the token was refused, else nil.
    public var tokenError: TokenError? {
        if case .token(let error) = self { return error }
        return nil
    }

    /// The ``KeySourceError`` when the keys could not be had, else nil.
    public var keySourceError: KeySourceError? {
        if case .keys(let error) = self { return error }
        return nil
    }

    /// The wrapped error itself, for code that catches `TokenError` and ``KeySourceError`` by type.
    public var underlying: any Error {
        switch self {
        case .token(let error): error
        case .keys(let error): error
        }
    }

    /// `code: message`, as the wrapped error says it.
    public var description: String {
        switch self {
        case .token(let error): error.description
        case .keys(let error): error.description
        }
    }
}

extension Result where Failure == TokenError {
    /// The value, or the token error wrapped as a ``RemoteVerificationError``.
    func getRemote() throws(RemoteVerificationError) -> Success {
        switch self {
        case .success(let value): return value
        case .failure(let error): throw .token(error)
        }
    }
}
