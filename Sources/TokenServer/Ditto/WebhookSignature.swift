public import Foundation
import Crypto
import TokenKit

/// Ditto's webhook signature: the `ditto-signature` header, `t=<unix seconds>,v1=<hex>` (several
/// `v1` while a secret is rotated), where each `v1` is HMAC-SHA256 over `"<t>.<raw body>"` keyed
/// by the base64-decoded shared secret. The webhook checks it, and that `t` is recent, before it
/// reads the body at all.
///
/// ```swift
/// let signature = try DittoWebhookSignature(secrets: [DittoWebhookSignature.secret(base64: text)])
/// try signature.check(request.headers["ditto-signature"], body: body)
/// ```
public struct DittoWebhookSignature: Sendable {
    /// The shared secrets (decoded), any of which may have signed.
    let secrets: [[UInt8]]
    /// How far the header's time may be from ours, either way.
    public let tolerance: TimeInterval

    /// The header's name.
    public static let headerName = "ditto-signature"

    /// Why a request's signature was refused.
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public enum Code: String, Sendable {
            /// No `ditto-signature` header, and one is required.
            case missing = "signature_missing"
            /// The header is not `t=<seconds>,v1=<hex>[,v1=<hex>…]`.
            case malformed = "signature_malformed"
            /// `t` is further from now than the tolerance.
            case stale = "signature_stale"
            /// No `v1` is the body's signature by any configured secret.
            case mismatch = "signature_mismatch"
        }
        public let code: Code
        public let message: String
        public var description: String { "\(code.rawValue): \(message)" }
    }

    /// A secret as Ditto shows it (base64, standard or URL-safe alphabet, padding optional,
    /// surrounding whitespace ignored), decoded; nil when it is not base64 or decodes to nothing.
    public static func secret(base64 text: String) -> [UInt8]? {
        // TokenKit's strict base64url decoder, after the standard alphabet's two letters and padding.
        let unpadded = text.trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "=", with: "")
        guard let bytes = Base64URL.decode(unpadded.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")),
            !bytes.isEmpty
        else { return nil }
        return bytes
    }

    /// Checks signatures by these secrets (at least one; each at least 16 bytes).
    public init(secrets: [[UInt8]], tolerance: TimeInterval = 300) throws(Refusal) {
        guard !secrets.isEmpty, secrets.allSatisfy({ $0.count >= 16 }) else {
            throw Refusal(code: .malformed, message: "a webhook signature needs at least one shared secret of 16 bytes or more")
        }
        self.secrets = secrets
        self.tolerance = tolerance
    }

    /// The header Ditto would send with `body` at `time` (unix seconds), signed by `secret`.
    public static func header(for body: [UInt8], secret: [UInt8], time: Int) -> String {
        "t=\(time),v1=\(Hex.encode(mac(body, secret: secret, time: String(time))))"
    }

    static func mac(_ body: [UInt8], secret: [UInt8], time: String) -> [UInt8] {
        var authentication = HMAC<SHA256>(key: SymmetricKey(data: secret))
        authentication.update(data: Array(time.utf8) + [UInt8(ascii: ".")])
        authentication.update(data: body)
        return Array(authentication.finalize())
    }

    /// Checks a request's header (nil when it has none) against its raw body. Comparisons take
    /// the same time whichever byte differs.
    public func check(_ header: String?, body: [UInt8], now: Date = Date()) throws(Refusal) {
        guard let header, !header.isEmpty else { throw Refusal(code: .missing, message: "the request has no ditto-signature header") }
        var time: String?
        var signatures: [[UInt8]] = []
        for part in header.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { throw Refusal(code: .malformed, message: "ditto-signature must be t=<unix seconds>,v1=<hex>") }
            let name = pair[0].trimmingCharacters(in: .whitespaces)
            let value = pair[1].trimmingCharacters(in: .whitespaces)
            switch name {
            case "t":
                guard time == nil, (1...12).contains(value.utf8.count), value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                    throw Refusal(code: .malformed, message: "ditto-signature needs one t, a unix time in seconds")
                }
                time = value
            case "v1":
                guard value.utf8.count == 64, let bytes = Self.hexBytes(value) else {
                    throw Refusal(code: .malformed, message: "a v1 of ditto-signature must be 64 hex digits (HMAC-SHA256)")
                }
                signatures.append(bytes)
            default: continue  // another scheme: not ours to read
            }
        }
        guard let time, let seconds = Double(time) else { throw Refusal(code: .malformed, message: "ditto-signature has no t") }
        guard !signatures.isEmpty else { throw Refusal(code: .malformed, message: "ditto-signature has no v1 signature") }
        let age = now.timeIntervalSince1970 - seconds
        guard abs(age) <= tolerance else {
            throw Refusal(code: .stale, message: "ditto-signature's time is \(Int(age.rounded())) s from now; at most \(Int(tolerance)) s is accepted")
        }
        var matched = false
        let signed = Array(time.utf8) + [UInt8(ascii: ".")] + body
        for secret in secrets {
            let key = SymmetricKey(data: secret)
            for signature in signatures where HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signed, using: key) {
                matched = true
            }
        }
        guard matched else { throw Refusal(code: .mismatch, message: "no v1 of ditto-signature is this body's signature by a configured secret") }
    }

    /// Hex digits (either case) as bytes; nil for anything else.
    static func hexBytes(_ text: String) -> [UInt8]? {
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: return c - 0x30
            case 0x61...0x66: return c - 0x61 + 10
            case 0x41...0x46: return c - 0x41 + 10
            default: return nil
            }
        }
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        var i = 0
        while i < digits.count {
            guard let high = nibble(digits[i]), let low = nibble(digits[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
    }
}
