import ArgumentParser

struct CACommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca",
        abstract: "Run a small CA that turns verified tokens into peer certificates.",
        discussion: """
            A CA lives in one directory: root.pem, issuer.pem and issuer.key (and root.key when an \
            intermediate issues), ca.json (trust domain, provider, limits) and ledger.sqlite (every \
            certificate issued, with its status). Private keys are mode 0600; nothing is overwritten.

            Examples:
              tokentool ca init --dir ca --app-id my-app --name "My devices" --intermediate
              tokentool csr --out device.key > device.csr
              tokentool ca issue --dir ca --csr device.csr \\
                  --jwks https://idp.example/jwks.json token.jwt > device.pem
              tokentool ca list --dir ca
              tokentool ca revoke --dir ca --reason keyCompromise 5f1c…
              tokentool ca crl --dir ca > crl.pem
            """,
        subcommands: [CAInit.self, CAIssue.self, CAProvision.self, CARevoke.self, CAList.self, CACRL.self])
}
