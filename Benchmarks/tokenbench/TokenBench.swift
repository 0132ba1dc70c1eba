import ArgumentParser
import CAllocCounter
import Foundation
import TokenKit

@main
struct TokenBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tokenbench",
        abstract: "Measure TokenKit's verification speed against the raw OpenSSL limit, in one process.",
        discussion: """
            For RS256, HS256, ES256 and EdDSA it times, on the same 1000 HAT-shaped tokens: \
            TokenKit's native engine, TokenKit's libjwt engine (not for EdDSA: libjwt 1.10 lacks it), \
            and the raw OpenSSL limit (key parsed once, signature decoded beforehand; SHA-256 + \
            EVP_PKEY_verify for RS256/ES256, EVP_DigestVerify for EdDSA, a keyed HMAC context \
            re-initialised per token for HS256). TokenKit rows include parsing and every claim check. \
            Before timing, every row must verify the algorithm it claims and refuse a tampered token.

            For HS256 also tokenkit.native.HS256.expired: the same tokens refused as expired (a \
            clock an hour and a quarter second past their exp), the error and its message built as a caller gets them.

            Then: throughput with N tasks on N cores and its ratio to one core, and heap allocations \
            per verification.

            Run it as: swift run -c release tokenbench
            With the peer harness: PROJECT_BENCH_CMD='swift run -c release tokenbench --peers "$PEERS_DATA"'
            """)

    @Option(help: "Seconds per repetition of each row.")
    var seconds: Double = 1

    @Option(help: "Repetitions per row (the median is reported).")
    var reps: Int = 3

    @Option(help: "Run only rows whose name contains this text (ending in $: exactly this name).")
    var filter: String?

    @Option(help: "Also write the results as JSON to this file.")
    var json: String?

    @Option(help: "Peer-harness mode: verify the tokens in this directory (rs256_tokens.txt, hs256_tokens.txt, rsa_public.pem, hs256_secret.bin) and print 'RS256 <tokens/s> <ns>' and 'HS256 <tokens/s> <ns>'.")
    var peers: String?

    @Option(help: "Peer-harness check mode (PROJECT_CHECK_CMD): print '<case> ACCEPT|REJECT' for each line of DIR/cases.tsv.")
    var peersCheck: String?

    @Option(help: "Memory soak: verify this many tokens per mode (HS256; HS256 with the verified-token cache; RS256 a tenth as many) and print the process RSS ten times along the way.")
    var soak: Int?

    @Option(help: "Issuance soak: issue this many certificates into a durable SQLite ledger, printing RSS and certificates/s ten times along the way.")
    var soakIssue: Int?

    @Flag(help: "Run the issuance rows instead of the token rows: openssl-raw.limit.issuance (the crypto no CA can skip, OpenSSL, one thread), peerca.issuance.1core (a child tokenbench under taskset -c 0) and peerca.issuance.2core (a child on both cores): token verify, CSR check, certificate, durable SQLite ledger. The limit is measured again after each library row, and a library row's ratio is to the mean of the limit just before and just after it. --filter picks among them.")
    var issuance = false

    @Option(help: "The issuance aims' two ratios as this many pairs of short runs (--seconds each, every run in its own child): the limit and the 1-core row, both under taskset -c 0, and the 2-core row, alternated; each 1-core run's ratio to the mean of the limit runs around it, each 2-core run's to the mean of the 1-core runs around it, and the medians with their range. Less of the machine's drift in the ratios than --issuance's rows, a minute apart. Each pair also runs the limit on both CPUs at once (two children, taskset -c 0 and -c 1: how far the crypto alone gains from the second CPU) and prints the rows' CPU time per certificate and busy share.")
    var issuancePairs: Int?

    @Option(help: "Issuances kept in flight by the issuance rows and --ledger-growth.")
    var window: Int = 64

    @Option(help: .hidden)
    var issuanceChild: String?

    @Flag(help: "Time each step of one issuance on one thread (token verify, CSR PEM/DER/signature, certificate build and sign, reply PEM and JSON; and a 20,000-serial logout reply, one call), without the ledger: where the time the limit row does not spend goes.")
    var issuanceStages = false

    @Option(help: "Cost as the ledger grows: for each row count (comma-separated; 1M, 10M, 500k accepted), fill the ledger to it with synthetic rows, then issue (in a child tokenbench that opens the ledger as filled) for --seconds × --reps on both cores and print certificates/s, p50/p99, RSS and the ledger's size.")
    var ledgerGrowth: String?

    @Option(help: "The ledger --ledger-growth fills: sqlite (a temporary file, removed afterwards), sqlite:PATH (kept), or postgres://user@host:port/database.")
    var ledgerStore: String = "sqlite"

    @Option(help: "After the --ledger-growth sweep (SQLite), this many pairs: a new empty ledger and the largest filled one, measured alternately (each in its own child, the order swapped every pair), with each pair's ratio and their median. The sweep measures each size once, minutes apart; the pairs take the machine's drift out of the ratio.")
    var growthPairs: Int = 0

    @Flag(help: .hidden)
    var ledgerGrowthChild = false

    func run() async throws {
        if let issuanceChild {
            try await IssuanceBench.runChild(name: issuanceChild, seconds: seconds, reps: reps, window: window)
            return
        }
        if issuanceStages {
            try await IssuanceStages.run(seconds: seconds, reps: reps, selected: selected)
            return
        }
        if let issuancePairs {
            try await IssuanceBench.runPairs(issuancePairs, seconds: seconds, window: window)
            return
        }
        if issuance {
            try await IssuanceBench.run(seconds: seconds, reps: reps, window: window, selected: selected, json: json)
            return
        }
        if ledgerGrowthChild {
            try await LedgerGrowth.runChild(store: ledgerStore, seconds: seconds, reps: reps, window: window)
            return
        }
        if let ledgerGrowth {
            try await LedgerGrowth.run(
                sizes: try LedgerGrowth.parseSizes(ledgerGrowth), store: ledgerStore, seconds: seconds, reps: reps, window: window, pairs: growthPairs)
            return
        }
        if let peersCheck {
            try PeersMode.check(directory: peersCheck)
            return
        }
        if let soak {
            try Soak.run(count: soak)
            return
        }
        if let soakIssue {
            try await IssuanceSoak.run(count: soakIssue)
            return
        }
        if let peers {
            try PeersMode.run(directory: peers, seconds: Double(ProcessInfo.processInfo.environment["BENCH_SECONDS"] ?? "") ?? seconds,
                              reps: Int(ProcessInfo.processInfo.environment["BENCH_REPS"] ?? "") ?? reps)
            return
        }
        var rows: [Row] = []
        let cores = ProcessInfo.processInfo.activeProcessorCount
        print("tokenbench: \(seconds) s × \(reps) repetitions per row; \(cores) cores; \(Workload.tokenCount) tokens per algorithm")
        print(Row.header)
        for algorithm in [JWTAlgorithm.rs256, .hs256, .es256, .eddsa] {
            let names = ["openssl-raw.limit.\(algorithm)", "tokenkit.native.\(algorithm).cache-hit"]
                + JWTVerifier.Engine.allCases.map { "tokenkit.\($0.rawValue).\(algorithm)" }
                + (algorithm == .hs256 ? ["tokenkit.native.\(algorithm).expired"] : [])
            if filter != nil, !names.contains(where: selected) { continue }
            let workload = try Workload(algorithm)
            let limit = try workload.rawLimit()
            var candidates: [(String, (Int) -> Bool)] = [("openssl-raw.limit.\(algorithm)", limit.verify)]
            for engine in JWTVerifier.Engine.allCases where engine == .native || algorithm != .eddsa {
                let verifier = try workload.verifier(engine: engine)
                let tokens = workload.tokens
                candidates.append(("tokenkit.\(engine.rawValue).\(algorithm)", { i in (try? verifier.verify(tokens[i])) != nil }))
            }
            // The verified-token cache: every token seen before, so each call is a hit that still
            // runs the claims policy.
            let cached = try workload.verifier(engine: .native, cache: VerifiedTokenCache(capacity: 2 * Workload.tokenCount))
            let cachedTokens = workload.tokens
            candidates.append(("tokenkit.native.\(algorithm).cache-hit", { i in (try? cached.verify(cachedTokens[i])) != nil }))
            if algorithm == .hs256 {
                // A refusal, the commonest one: every token past its `exp` (a clock an hour and a
                // fraction after it), signature checked, then refused with the message a caller sees. True when
                // refused as expired, so the row's check counts refusals.
                let late = try workload.verifier(engine: .native, clock: Workload.lateClock)
                let lateTokens = workload.tokens
                candidates.append(("tokenkit.native.\(algorithm).expired", { i in
                    do throws(TokenError) { _ = try late.verify(lateTokens[i]) } catch { return error.code == .expired && !error.message.isEmpty }
                    return false
                }))
            }
            let limitBody = candidates[0].1
            for (name, body) in candidates {
                if !selected(name) { continue }
                try workload.check(name: name, body)
                let m = measure(count: workload.tokens.count, seconds: seconds, reps: reps, body)
                let isLimit = name.hasPrefix("openssl-raw")
                // The ratio comes from a paired run: the row and the limit alternate in short
                // slices, so a noisy neighbour or a clock change hits both alike.
                let ratio = isLimit ? 1 : pairedRatio(count: workload.tokens.count, seconds: seconds * Double(reps), candidate: body, limit: limitBody)
                let allocations = name.hasPrefix("tokenkit") ? allocationsPerCall(count: workload.tokens.count, body) : nil
                let row = Row(name: name, algorithm: algorithm, measurement: m, ratio: ratio, allocations: allocations)
                print(row.line)
                rows.append(row)
            }
        }
        var scaling: [ScalingResult] = []
        if filter == nil || "scaling".contains(filter ?? "") || (filter ?? "").contains("scaling") {
            print("")
            print("Scaling, TokenKit native engine, \(cores) tasks on \(cores) cores vs 1:")
            for algorithm in [JWTAlgorithm.rs256, .hs256] {
                let workload = try Workload(algorithm)
                let verifier = try workload.verifier(engine: .native)
                let result = await Scaling.measure(algorithm: algorithm, tasks: cores, seconds: seconds, tokens: workload.tokens) { token in
                    (try? verifier.verify(token)) != nil
                }
                print(result.line)
                scaling.append(result)
            }
        }
        if let json { try Report.write(rows: rows, scaling: scaling, seconds: seconds, reps: reps, to: json) }
    }

    /// Whether `--filter` selects the row `name`.
    func selected(_ name: String) -> Bool {
        guard let filter else { return true }
        if filter.hasSuffix("$") { return name == filter.dropLast() }
        return name.contains(filter)
    }

    /// Throughput ratio candidate/limit from 20 alternating slices totalling `seconds`.
    func pairedRatio(count: Int, seconds: Double, candidate: (Int) -> Bool, limit: (Int) -> Bool) -> Double {
        let slices = 20
        let slice = seconds / Double(slices)
        var candidateRate = 0.0, limitRate = 0.0
        for s in 0..<slices {
            // Alternate which goes first, so neither always follows the other.
            if s % 2 == 0 {
                limitRate += measure(count: count, seconds: slice / 2, reps: 1, limit).tokensPerSecond
                candidateRate += measure(count: count, seconds: slice / 2, reps: 1, candidate).tokensPerSecond
            } else {
                candidateRate += measure(count: count, seconds: slice / 2, reps: 1, candidate).tokensPerSecond
                limitRate += measure(count: count, seconds: slice / 2, reps: 1, limit).tokensPerSecond
            }
        }
        return candidateRate / limitRate
    }

    /// Heap allocations per call on this thread, over one pass of the batch.
    func allocationsPerCall(count: Int, _ body: (Int) -> Bool) -> Double {
        for i in 0..<count { _ = body(i) }  // warm caches first
        let before = tb_alloc_count()
        tb_alloc_counting(1)
        for i in 0..<count { _ = body(i) }
        tb_alloc_counting(0)
        return Double(tb_alloc_count() - before) / Double(count)
    }
}

struct Row {
    let name: String
    let algorithm: JWTAlgorithm
    let measurement: Measurement
    let ratio: Double?
    let allocations: Double?

    static let header = "row".padding(toLength: 34, withPad: " ", startingAt: 0) + "    tokens/s   ns/token  ratio-to-limit  allocs/verify"

    var line: String {
        let tps = String(format: "%11.0f", measurement.tokensPerSecond)
        let ns = String(format: "%10.0f", measurement.nanosecondsPerToken)
        let r = ratio.map { String(format: "%14.3f", $0) } ?? String(repeating: " ", count: 14)
        let a = allocations.map { String(format: "%14.1f", $0) } ?? ""
        return name.padding(toLength: 34, withPad: " ", startingAt: 0) + tps + " " + ns + "  " + r + " " + a
    }
}
