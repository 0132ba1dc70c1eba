import Foundation
import TokenKit

enum Report {
    static func write(rows: [Row], scaling: [ScalingResult], seconds: Double, reps: Int, to path: String) throws {
        var items: [JSONValue] = []
        for row in rows {
            var o: [String: JSONValue] = [
                "name": .string(row.name), "alg": .string(row.algorithm.rawValue),
                "tokens_per_s": .number(String(format: "%.0f", row.measurement.tokensPerSecond)),
                "ns_per_token": .number(String(format: "%.1f", row.measurement.nanosecondsPerToken)),
            ]
            if let r = row.ratio { o["ratio_to_limit"] = .number(String(format: "%.4f", r)) }
            if let a = row.allocations { o["allocations_per_verify"] = .number(String(format: "%.2f", a)) }
            items.append(.object(o))
        }
        let scalingItems: [JSONValue] = scaling.map {
            .object([
                "alg": .string($0.algorithm.rawValue), "tasks": .integer($0.tasks),
                "single_tokens_per_s": .number(String(format: "%.0f", $0.single)),
                "parallel_tokens_per_s": .number(String(format: "%.0f", $0.parallel)),
                "ratio": .number(String(format: "%.3f", $0.ratio)),
            ])
        }
        let document: JSONValue = .object([
            "seconds": .number(String(seconds)), "reps": .integer(reps),
            "cores": .integer(ProcessInfo.processInfo.activeProcessorCount),
            "rows": .array(items), "scaling": .array(scalingItems),
        ])
        try Data((document.prettyText + "\n").utf8).write(to: URL(fileURLWithPath: path))
    }
}
