import Foundation
import TestSupport
import Testing

/// A command that signs with a CA key exits while other threads may be inside OpenSSL; OpenSSL's
/// clean-up at exit once crashed such processes (SIGSEGV, about one `ca crl` in five, when first
/// seen). TokenKit's `COpenSSLProcess` initialises OpenSSL without that clean-up. 40 runs must all
/// exit 0; `OpenSSLExitTests` is what checks the mechanism.
@Suite("Commands that sign exit cleanly")
struct SigningExitTests {
    @Test func caCRLExitsCleanlyEveryTime() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let initialised = try run(tokentoolExecutable, ["ca", "init", "--dir", "ca", "--app-id", "exits"], cwd: dir)
        #expect(initialised.status == 0, "\(initialised.err)")
        var statuses: [Int32] = []
        for _ in 0..<40 {
            let crl = try run(tokentoolExecutable, ["ca", "crl", "--dir", "ca"], cwd: dir)
            statuses.append(crl.status)
            #expect(crl.out.contains("BEGIN X509 CRL"), "\(crl.err.suffix(600))")
        }
        #expect(statuses.allSatisfy { $0 == 0 }, "\(statuses)")
    }
}
