import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where a verifier reads the current time from. Inject a fixed clock in tests.
public struct VerificationClock: Sendable {
    let read: @Sendable () -> NumericDate

    /// A clock that returns `read()` seconds since the Unix epoch.
    public init(_ read: @escaping @Sendable () -> NumericDate) { self.read = read }

    /// The system's wall clock.
    public static let system = VerificationClock { Date().timeIntervalSince1970 }

    /// A clock stopped at `seconds` since the Unix epoch.
    public static func fixed(_ seconds: NumericDate) -> VerificationClock { VerificationClock { seconds } }

    public var now: NumericDate { read() }
}
