import Foundation
import NIOHTTP1
@testable import PeerCA
import TestSupport
import Testing
import TokenKit
@testable import TokenServer

/// The inputs that once made a fuzz target fail (Fuzz/Regressions/FuzzWebhook/), replayed the way
/// the FuzzWebhook harness feeds them: the first byte picks the endpoint (even `/v1/auth`, odd
/// `/v1/certificates`), `@T` becomes a token the dev provider accepts and `@C` a valid CSR.
@Suite("Fuzz regressions, replayed")
struct FuzzRegressionTests {
    static let directory = ContractTests.root.appendingPathComponent("Fuzz/Regressions/FuzzWebhook")

    static func substitute(_ input: [UInt8], _ needle: String, _ replacement: String) -> [UInt8] {
        Array(String(decoding: input, as: UTF8.self).replacingOccurrences(of: needle, with: replacement).utf8)
    }

    /// Each input keeps the harness's invariants (a JSON object with a known status; an issued
    /// certificate names the token's identity), and after it the ledger's writer holds no
    /// certificate's DER in a prepared statement: LeakSanitizer found the cached INSERT keeping
    /// the last one (`leak-e7c3888d…`), which `swift test` would not see as a leak.
    @Test func webhookInputsStayHandledAndTheLedgerKeepsNoDER() async throws {
        let inputs = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path).sorted()
        #expect(!inputs.isEmpty, "no regression inputs in \(Self.directory.path)")
        try await LiveServer.with { server in
            let token = try server.token(["sub": .string("fuzz-user")])
            let csr = try DeviceCSR.make(key: try CAKeyAlgorithm.p256.generate()).replacingOccurrences(of: "\n", with: "\\n")
            let ledger = try #require(server.service.ca.ledger as? SQLiteLedger, "the embedded defaults' ledger is SQLite")
            for name in inputs {
                let raw = Array(try Data(contentsOf: Self.directory.appendingPathComponent(name)))
                guard let first = raw.first else { continue }
                let body = Self.substitute(Self.substitute(Array(raw.dropFirst()), "@T", token), "@C", csr)
                let path = first % 2 == 0 ? "/v1/auth" : "/v1/certificates"
                let (status, bytes, _) = try await server.request(.POST, path, body: body)
                let answer = try #require(try? JSONValue.parse(bytes).objectValue, "\(name): not a JSON object")
                #expect([200, 400, 401, 403, 413, 503].contains(status), "\(name): \(status)")
                if path == "/v1/certificates", status == 200 {
                    #expect(answer["identity"]?.objectValue?["account"]?.stringValue == "dev:fuzz-user", "\(name): \(answer)")
                }
                let held = try await ledger.statementsHoldingBlobs()
                #expect(held.isEmpty, "\(name): \(held)")
            }
        }
    }
}
