import Foundation
import GRDB
import PeerCA
import TestSupport
import Testing

/// The SQLite ledger's indexes as the issuance path and the lookups use them.
@Suite("SQLite ledger schema")
struct SQLiteLedgerSchemaTests {
    /// A lookup by SPIFFE ID or account reads indexes only (no scan of the certificates); a
    /// certificate for a known (SPIFFE ID, account) pair adds no row to `certificate_subjects`, and
    /// there is no index of every certificate's SPIFFE ID (the cost it had per certificate is what
    /// the table avoids).
    @Test func lookupsUseIndexesAndKnownPairsAddNoRow() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        for i in 0..<6 {
            try await ledger.record(entry(String(format: "2b%02x", i), subject: "spiffe://app/idp/u\(i % 2)", commonName: "u\(i % 2)", issuedAt: 1_800_000_000 + Double(i)), claiming: nil)
        }
        let queue = try DatabaseQueue(path: path)
        try await queue.read { db in
            let plan = try queryPlan(db, SQLiteLedger.bySubjectOrAccount, "u0")
            #expect(!plan.isEmpty)
            #expect(!plan.contains { $0.hasPrefix("SCAN certificates") }, "plan: \(plan)")
            #expect(plan.contains { $0.contains("certificates_common_name") }, "plan: \(plan)")
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM certificate_subjects") == 2)
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'certificates' AND sql LIKE '%(subject)%'") == 0)
        }
        #expect(try await ledger.entries(subject: "spiffe://app/idp/u1").map(\.serial) == ["2b05", "2b03", "2b01"])

        // A row written by other code (an older tokentool on the same file, a repair by hand)
        // is found by its SPIFFE ID too: the pair comes from the table's trigger.
        try await queue.write { db in
            try db.execute(sql: """
                INSERT INTO certificates (serial, subject, common_name, token_issuer, token_subject, token_id, key_fingerprint,
                    not_before, not_after, issued_at, der) VALUES ('2bff', 'spiffe://app/idp/by-hand', 'hand', 'i', 'hand', NULL, 'ab', 1, 2, 1800000100, x'30')
                """)
        }
        #expect(try await ledger.entries(subject: "spiffe://app/idp/by-hand").map(\.serial) == ["2bff"])
        #expect(try await ledger.entries(subject: "hand").map(\.serial) == ["2bff"])
    }

    /// CRLs (`revoked(notExpiredAt:)`) read the partial index of revoked certificates: no scan or
    /// sort of the table, which at 10 M rows is gigabytes. A new certificate adds no entry to it.
    @Test func revokedCertificatesAreReadFromTheirIndex() async throws {
        let path = try temporaryDirectory().appendingPathComponent("ledger.sqlite").path
        let ledger = try SQLiteLedger(path: path)
        for i in 0..<8 {
            try await ledger.record(entry(String(format: "3c%02x", i), issuedAt: 1_800_000_000 + Double(i)), claiming: nil)
        }
        _ = try await ledger.revoke(serial: "3c02", reason: .keyCompromise, at: Date(timeIntervalSince1970: 1_800_000_100))
        _ = try await ledger.revoke(serial: "3c05", reason: .superseded, at: Date(timeIntervalSince1970: 1_800_000_050))
        let queue = try DatabaseQueue(path: path)
        try await queue.read { db in
            let revoked = try queryPlan(db, SQLiteLedger.revokedNotExpired, 1_800_000_000.0)
            #expect(revoked.contains { $0.contains("certificates_revoked") }, "plan: \(revoked)")
            #expect(!revoked.contains { $0 == "SCAN certificates" || $0.contains("TEMP B-TREE") }, "plan: \(revoked)")
            // A partial index: only revoked certificates have an entry.
            #expect(try Int.fetchOne(db, sql: "SELECT partial FROM pragma_index_list('certificates') WHERE name = 'certificates_revoked'") == 1)
        }
        #expect(try await ledger.revoked(notExpiredAt: Date(timeIntervalSince1970: 1_800_000_000)).map(\.serial) == ["3c05", "3c02"])
        #expect(try await ledger.recent(limit: 3).map(\.serial) == ["3c07", "3c06", "3c05"])
    }

    /// The steps SQLite plans for `SELECT * FROM certificates` + `clause` with one argument.
    private func queryPlan(_ db: Database, _ clause: String, _ argument: any DatabaseValueConvertible) throws -> [String] {
        try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN SELECT * FROM certificates " + clause, arguments: [argument]).map { $0["detail"] as String? ?? "" }
    }
}
