import Foundation

/// When a signed revocation answer — a CRL, an OCSP response to a request without a nonce — is
/// given again instead of made anew: from the time it was made until half its validity has passed
/// (RFC 5019's pre-produced responses), while it still says the same thing. The other half leaves
/// whoever cached it time to fetch the next one before it expires.
enum Reissue {
    static func stillCurrent(madeAt made: Date, validity: TimeInterval, now: Date) -> Bool {
        made <= now && now < made.addingTimeInterval(validity / 2)
    }
}
