import Crypto
import SwiftASN1
import X509

/// The common request, checked without swift-certificates' generic parse: a P-256 key signed with
/// ECDSA-SHA256, as `openssl req`, Python's `cryptography`, swift-certificates and ``DeviceCSR``
/// make them, PEM in the canonical layout or DER. Its subject and attributes (ignored by the CA)
/// are checked by swift-certificates' own parsers for those parts when they are not empty.
///
/// What this path accepts is a subset of what the generic one does, and gives the same
/// ``ValidatedCSR``: anything it does not recognise — another key or algorithm, a non-minimal DER
/// length, a subject or attributes swift-certificates does not read, a PEM with CRLF line ends, text around it or other line lengths, a key
/// not on the curve, a signature that is not strict DER — goes to the generic path, which decides
/// (and words the error). The one verdict it gives itself is a signature that does not verify on a
/// request it parsed whole: the generic path parses that request to the same key, the same
/// signed bytes and the same (r, s), so it would refuse it the same way. Measured by
/// `taskset -c 0 tokenbench --issuance-stages` (`csr.validate`).
enum CSRFastPath {
    /// `-----BEGIN CERTIFICATE REQUEST-----\n` and `-----BEGIN NEW CERTIFICATE REQUEST-----\n`,
    /// each with its END line (no line end).
    static let armour: [(begin: [UInt8], end: [UInt8])] = ["CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"].map {
        (Array("-----BEGIN \($0)-----\n".utf8), Array("-----END \($0)-----".utf8))
    }

    /// Values of the standard base64 alphabet; 0xFE for `=`, 0xFF for anything else.
    static let base64Values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (value, character) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8.enumerated() {
            table[Int(character)] = UInt8(value)
        }
        table[Int(UInt8(ascii: "="))] = 0xFE
        return table
    }()

    /// The DER inside a PEM CSR laid out canonically: the BEGIN line first, then base64 lines of
    /// exactly 64 characters each ending in `\n`, the last one 4 to 64 (a multiple of 4, `=`-padded,
    /// zero bits after the data), then the END line, then at most one `\n`. Nil for any other
    /// layout: swift-asn1's `PEMDocument` (the generic path) accepts all of these and more, and
    /// decodes them to the same bytes.
    static func canonicalPEMBody(_ bytes: [UInt8]) -> [UInt8]? {
        guard let armour = armour.first(where: { bytes.starts(with: $0.begin) }) else { return nil }
        let bodyStart = armour.begin.count
        // Base64 has no '-': the first one starts the END line.
        guard let bodyEnd = bytes[bodyStart...].firstIndex(of: UInt8(ascii: "-")), bodyEnd > bodyStart,
            bytes[bodyEnd - 1] == 0x0A
        else { return nil }
        let tail = bytes[bodyEnd...]
        guard tail.starts(with: armour.end), tail.count == armour.end.count || (tail.count == armour.end.count + 1 && tail.last == 0x0A)
        else { return nil }

        return bytes.withUnsafeBufferPointer { input in decodeLines(input, bodyStart..<bodyEnd) }
    }

    /// The canonical base64 lines at `range` (each ending in `\n`), decoded; nil if they are not.
    private static func decodeLines(_ input: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> [UInt8]? {
        // Lines of 64 characters plus `\n`, the last one 1…64: the line ends are where they must be.
        let full = (range.count - 1) / 65
        let lastLength = range.count - 65 * full - 1
        guard lastLength >= 1 else { return nil }
        var characters = 64 * full + lastLength
        guard characters % 4 == 0 else { return nil }
        for line in 0..<full where input[range.lowerBound + 65 * line + 64] != 0x0A { return nil }
        // `=` padding (at most two) ends the last line; no other `=`.
        let last = range.upperBound - 2
        let padding = input[last] == UInt8(ascii: "=") ? (input[last - 1] == UInt8(ascii: "=") ? 2 : 1) : 0
        guard characters - padding >= 2 else { return nil }
        characters -= padding
        return base64Values.withUnsafeBufferPointer { values -> [UInt8]? in
            var out = [UInt8](repeating: 0, count: (characters + padding) / 4 * 3)
            var valid = true
            let written = out.withUnsafeMutableBufferPointer { out -> Int in
                var group: UInt32 = 0, count = 0, o = 0
                for index in range.lowerBound..<(range.upperBound - 1) where (index - range.lowerBound) % 65 != 64 {
                    let value = count < characters ? values[Int(input[index])] : 0  // the padding stands for zero bits
                    if count < characters, value > 63 {
                        valid = false  // not base64 (a line end in the wrong place, or `=` before the end)
                        return 0
                    }
                    group = group << 6 | UInt32(value)
                    count += 1
                    if count & 3 == 0 {
                        out[o] = UInt8(truncatingIfNeeded: group >> 16)
                        out[o + 1] = UInt8(truncatingIfNeeded: group >> 8)
                        out[o + 2] = UInt8(truncatingIfNeeded: group)
                        o += 3
                        group = 0
                    }
                }
                return o
            }
            guard valid, written == out.count else { return nil }
            // The bytes the padding stands for hold the last character's spare bits: zero in canonical base64.
            for _ in 0..<padding {
                guard out.removeLast() == 0 else { return nil }
            }
            return out
        }
    }

    /// A P-256 request's key and signed bytes, located in its DER.
    struct Request {
        /// The SubjectPublicKeyInfo element (the exact named-curve P-256 encoding).
        let subjectPublicKeyInfo: ArraySlice<UInt8>
        /// The uncompressed point `04 X Y`.
        let point: ArraySlice<UInt8>
        /// The CertificationRequestInfo element: what the signature covers.
        let info: ArraySlice<UInt8>
        /// The subject Name element.
        let subject: ArraySlice<UInt8>
        /// The attributes element (`[0]`, `a0 00` when there are none).
        let attributes: ArraySlice<UInt8>
        /// Where the ECDSA-Sig-Value DER lies inside the signature BIT STRING.
        let signature: Range<Int>
    }

    /// `SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING 00 04 …`: 27 bytes, then X and Y.
    static let p256SPKIPrefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
        0x03, 0x42, 0x00, 0x04,
    ]
    static let attributesTag = ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)
    /// `SEQUENCE { ecdsa-with-SHA256 }` (parameters absent, RFC 5758 §3.2).
    static let ecdsaWithSHA256: [UInt8] = [0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]

    /// Locates the parts of `CertificationRequest ::= SEQUENCE { SEQUENCE { INTEGER 0, Name,
    /// SubjectPublicKeyInfo (P-256), [0] Attributes }, SEQUENCE { ecdsa-with-SHA256 }, BIT STRING }` in
    /// strict DER (minimal lengths) that spans all of `der`. Nil for anything else.
    static func locate(_ der: [UInt8]) -> Request? {
        var reader = StrictDER(der)
        guard let outer = reader.contents(tag: 0x30), reader.atEnd else { return nil }
        var request = StrictDER(der, outer)
        let infoStart = request.position
        guard let infoContents = request.contents(tag: 0x30) else { return nil }
        let info = der[infoStart..<infoContents.upperBound]
        var fields = StrictDER(der, infoContents)
        guard fields.literal([0x02, 0x01, 0x00]) else { return nil }
        let subjectStart = fields.position
        guard let subjectContents = fields.contents(tag: 0x30) else { return nil }
        let keyStart = fields.position
        guard fields.literal(p256SPKIPrefix), let point = fields.take(64) else { return nil }
        let attributesStart = fields.position
        guard let attributes = fields.contents(tag: 0xa0), fields.atEnd else { return nil }
        guard request.literal(ecdsaWithSHA256), let bits = request.contents(tag: 0x03), request.atEnd else { return nil }
        guard bits.count >= 1, der[bits.lowerBound] == 0 else { return nil }
        return Request(
            subjectPublicKeyInfo: der[keyStart..<point.upperBound], point: der[(point.lowerBound - 1)..<point.upperBound], info: info,
            subject: der[subjectStart..<subjectContents.upperBound], attributes: der[attributesStart..<attributes.upperBound], signature: (bits.lowerBound + 1)..<bits.upperBound)
    }

    /// The request's SubjectPublicKeyInfo when it is one this path covers and its self-signature
    /// verifies; nil when the path does not cover it (the generic path decides). Throws only for a
    /// covered request whose signature does not verify.
    static func check(_ der: [UInt8]) throws(PeerCAError) -> ArraySlice<UInt8>? {
        guard let request = locate(der) else { return nil }
        // An empty subject (`30 00`, as devices send) and no attributes (`a0 00`) need no check;
        // others must be what swift-certificates reads, as its parse of the whole request requires.
        // Both sit at depth 3 of the request; swift-asn1 refuses a tree deeper than 50, which a
        // parse of the part alone would not see.
        if request.subject.count != 2 {
            guard StrictDER.fits(request.subject, depth: 3), let node = try? DER.parse(request.subject),
                (try? DistinguishedName(derEncoded: node)) != nil
            else { return nil }
        }
        if request.attributes.count != 2 {
            guard StrictDER.fits(request.attributes, depth: 3), let node = try? DER.parse(request.attributes),
                (try? DER.set(of: CertificateSigningRequest.Attribute.self, identifier: attributesTag, rootNode: node)) != nil
            else { return nil }
        }
        guard let key = try? P256.Signing.PublicKey(x963Representation: request.point),
            let raw = rawSignature(der, request.signature), let signature = try? P256.Signing.ECDSASignature(rawRepresentation: raw)
        else { return nil }
        guard key.isValidSignature(signature, for: SHA256.hash(data: request.info)) else {
            throw PeerCAError(.badCSRSignature, ValidatedCSR.badSignatureMessage)
        }
        return request.subjectPublicKeyInfo
    }
}

extension CSRFastPath {
    /// r and s of an ECDSA-Sig-Value (`SEQUENCE { INTEGER r, INTEGER s }`) at `range` of `der`, each
    /// as 32 big-endian bytes; nil unless both are non-negative INTEGERs in their minimal encoding
    /// below 2^256 (anything else is the generic parser's to judge). Those are the encodings the
    /// generic path reads to the same 32 bytes (swift-asn1's INTEGER as bytes, a leading zero
    /// dropped, padded to 32 by swift-certificates); the values are those BoringSSL's DER reader
    /// gives (`signatureIntegersAreReadAsBoringSSLReadsThem`). Going through BoringSSL's reader
    /// instead cost a conversion to numbers and back.
    static func rawSignature(_ der: [UInt8], _ range: Range<Int>) -> [UInt8]? {
        var outer = StrictDER(der, range)
        guard let sequence = outer.contents(tag: 0x30), outer.atEnd else { return nil }
        var reader = StrictDER(der, sequence)
        var raw = [UInt8](repeating: 0, count: 64)
        for half in 0..<2 {
            guard let integer = reader.contents(tag: 0x02), !integer.isEmpty, der[integer.lowerBound] < 0x80 else { return nil }
            var start = integer.lowerBound
            if der[start] == 0, integer.count > 1 {
                guard der[start + 1] >= 0x80 else { return nil }  // a redundant leading zero
                start += 1
            }
            let length = integer.upperBound - start
            guard length <= 32 else { return nil }
            raw.replaceSubrange((32 * half + 32 - length)..<(32 * half + 32), with: der[start..<integer.upperBound])
        }
        return reader.atEnd ? raw : nil
    }
}

/// Walks strict DER: single-octet tags, definite lengths in their shortest form.
struct StrictDER {
    private let bytes: [UInt8]
    private(set) var position: Int
    private let end: Int

    init(_ bytes: [UInt8]) { self.init(bytes, 0..<bytes.count) }

    init(_ bytes: [UInt8], _ range: Range<Int>) {
        self.bytes = bytes
        position = range.lowerBound
        end = range.upperBound
    }

    var atEnd: Bool { position == end }

    /// The contents' range of the element with `tag` at the position; moves past it.
    mutating func contents(tag: UInt8) -> Range<Int>? {
        guard end - position >= 2, bytes[position] == tag else { return nil }
        let first = Int(bytes[position + 1])
        var start = position + 2
        var length = first
        switch first {
        case 0..<0x80: break
        case 0x81:
            guard start < end, bytes[start] >= 0x80 else { return nil }
            length = Int(bytes[start])
            start += 1
        case 0x82:
            guard end - start >= 2, bytes[start] != 0 else { return nil }
            length = Int(bytes[start]) << 8 | Int(bytes[start + 1])
            start += 2
        default: return nil  // longer than a CSR may be, or indefinite
        }
        guard length <= end - start else { return nil }
        position = start + length
        return start..<position
    }

    /// Whether `expected` follows at the position; moves past it if so.
    mutating func literal(_ expected: [UInt8]) -> Bool {
        guard end - position >= expected.count, bytes[position..<(position + expected.count)].elementsEqual(expected) else { return false }
        position += expected.count
        return true
    }

    /// Whether the elements of `slice` (one-octet tags; the first at `depth`) nest no deeper than
    /// swift-asn1's parser allows (50 levels).
    static func fits(_ slice: ArraySlice<UInt8>, depth: Int) -> Bool {
        var reader = StrictDER(Array(slice))
        return reader.elementsFit(depth: depth)
    }

    private mutating func elementsFit(depth: Int) -> Bool {
        guard depth <= 50 else { return false }
        while !atEnd {
            let tag = bytes[position]
            guard tag & 0x1f != 0x1f, let inner = contents(tag: tag) else { return false }
            if tag & 0x20 != 0 {
                var child = StrictDER(bytes, inner)
                guard child.elementsFit(depth: depth + 1) else { return false }
            }
        }
        return true
    }

    /// The next `count` bytes' range; moves past them.
    mutating func take(_ count: Int) -> Range<Int>? {
        guard end - position >= count else { return nil }
        position += count
        return (position - count)..<position
    }
}
