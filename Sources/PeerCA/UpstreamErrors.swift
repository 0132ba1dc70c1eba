import Foundation

/// The places where an upstream library says what went wrong only in its error's text, each
/// behind one function here so a change upstream breaks one place (and its tests: the CSR tests'
/// short RSA key).
enum UpstreamErrors {
    /// swift-crypto refuses RSA keys shorter than 2048 bits while a CSR is parsed, with an error
    /// whose description names `incorrectParameterSize`.
    static func isShortRSAKey(_ error: any Error) -> Bool {
        "\(error)".contains("incorrectParameterSize")
    }
}
