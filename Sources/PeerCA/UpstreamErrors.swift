import Foundation
import GRDB

/// The places where an upstream library says what went wrong only in its error's text, each
/// behind one function here so a change upstream breaks one place (and its tests: the CSR tests'
/// short RSA key, the ledger conformance suite's token reuse and duplicate serial).
enum UpstreamErrors {
    /// swift-crypto refuses RSA keys shorter than 2048 bits while a CSR is parsed, with an error
    /// whose description names `incorrectParameterSize`.
    static func isShortRSAKey(_ error: any Error) -> Bool {
        "\(error)".contains("incorrectParameterSize")
    }

    /// The table whose UNIQUE or PRIMARY KEY constraint an SQLite error broke, from SQLite's
    /// message `UNIQUE constraint failed: token_uses.issuer, token_uses.token_id`; nil for other errors.
    static func sqliteUniqueTable(_ error: DatabaseError) -> String? {
        guard error.resultCode == .SQLITE_CONSTRAINT, let message = error.message,
            let range = message.range(of: "constraint failed: ")
        else { return nil }
        let rest = message[range.upperBound...]
        return rest.split(separator: ".", maxSplits: 1).first.map(String.init)
    }
}
