import Foundation
import TestSupport
import Testing

/// Issue 18's measuring tools run end to end, briefly (the debug build, tenths of a second a
/// row): the issuance rows with their limit in the same run, and the cost as the ledger grows on
/// SQLite and PostgreSQL. What they measure is not asserted (speed belongs to `tokenbench` runs
/// on a release build), only that every row is there, issued, recorded and compared.
@Suite("tokenbench's issuance modes", .serialized)
struct IssuanceBenchTests {
    /// The `tokenbench` executable built next to `tokentool`.
    static var tokenbench: URL { tokentoolExecutable.deletingLastPathComponent().appendingPathComponent("tokenbench") }

    /// The rate (second column) of the row named `name`, and the row.
    static func row(_ name: String, in output: String) -> (rate: Int, line: String)? {
        guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix(name + " ") }) else { return nil }
        let columns = line.split(separator: " ")
        return columns.count > 1 ? Int(columns[1]).map { ($0, String(line)) } : nil
    }

    /// `--issuance`: the limit row (OpenSSL, one thread) and the library rows on one and two cores,
    /// each with its ratio, and every certificate a library row issued in its durable ledger.
    @Test func issuanceRowsComeWithTheirLimitInTheSameRun() async throws {
        let result = try await runDetached(Self.tokenbench, ["--issuance", "--seconds", "0.3", "--reps", "1"])
        #expect(result.status == 0, "\(result.err)")
        let limit = Self.row("openssl-raw.limit.issuance", in: result.out)
        #expect((limit?.rate ?? 0) > 0, "\(result.out)")
        for name in ["peerca.issuance.1core", "peerca.issuance.2core"] {
            let row = Self.row(name, in: result.out)
            #expect((row?.rate ?? 0) > 0, "\(name): \(result.out)")
            #expect(row?.line.contains("all in the ledger") == true, "\(name): \(row?.line ?? "")")
            #expect(row?.line.contains("certs/commit") == true, "\(name): \(row?.line ?? "")")
        }
        #expect(Self.row("peerca.issuance.1core", in: result.out)?.line.contains("taskset -c 0") == true)
        #expect(Self.row("peerca.issuance.2core", in: result.out)?.line.contains("× the 1-core row") == true)
        #expect(result.out.contains("the limit, measured 3 times in this run"), "\(result.out)")
    }

    /// `--ledger-growth` on SQLite: a ledger filled with synthetic rows to the size asked, the rate
    /// there against the empty ledger's, and alternated pairs of the two.
    @Test func theLedgerGrowthModeFillsAndComparesAnSQLiteLedger() async throws {
        let result = try await runDetached(
            Self.tokenbench, ["--ledger-growth", "0,20000", "--ledger-store", "sqlite", "--seconds", "0.3", "--reps", "1", "--growth-pairs", "1"])
        #expect(result.status == 0, "\(result.err)")
        let filled = result.out.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("20000 ") }
        #expect(filled?.contains("rows in") == true, "\(result.out)")
        #expect(result.out.contains("rate / rate at 2 rows"), "\(result.out)")
        #expect(result.out.contains("median of 1 pairs"), "\(result.out)")
    }

    /// `--ledger-growth` on PostgreSQL (a throw-away server on loopback).
    @Test func theLedgerGrowthModeFillsAPostgreSQLLedger() async throws {
        let result = try await withTestPostgres { url in
            try await runDetached(Self.tokenbench, ["--ledger-growth", "0,5000", "--ledger-store", url, "--seconds", "0.3", "--reps", "1"])
        }
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("PostgreSQL"), "\(result.out)")
        let filled = result.out.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("5000 ") }
        #expect(filled?.contains("rows in") == true, "\(result.out)")
        #expect(result.out.contains("rate / rate at 2 rows"), "\(result.out)")
    }
}
