import ArgumentParser
import Foundation
import PeerCA
import TokenKit

/// A validity on the command line: seconds, or a number followed by s, m, h or d.
struct ValiditySpan: ExpressibleByArgument, Sendable {
    let seconds: TimeInterval

    init?(argument: String) {
        guard let parsed = Self.parse(argument) else { return nil }
        seconds = parsed
    }

    static func parse(_ text: String) -> TimeInterval? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        var number = Substring(text.trimmingCharacters(in: .whitespaces))
        var unit = 1.0
        if let last = number.last, let scale = units[last] {
            unit = scale
            number = number.dropLast()
        }
        guard let value = Double(number), value.isFinite, value > 0 else { return nil }
        return value * unit
    }
}

struct CAProvision: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "provision",
        abstract: "Provision many devices with no token (Ditto's Manual identity), all or nothing.",
        discussion: """
            The CSV has a header line naming its columns: deviceID and csr (a CSR file, relative to \\
            the CSV's directory), and optionally validity (per device, else --validity). Fields are \\
            separated by commas and not quoted; a device ID is a file name's letters: A-Z a-z 0-9 . _ @ - \\
            (not starting with a dot). Every row is checked and every CSR verified before anything \\
            is issued; if one certificate cannot be issued or the files cannot be written, the ones \\
            issued in this run are revoked (cessationOfOperation) and no file is written. Each \\
            device's chain goes to <out>/<deviceID>.pem; standard output lists serials and expiries.

            A devices.csv:
              deviceID,csr,validity
              kiosk-1,csr/kiosk-1.csr,
              kiosk-2,csr/kiosk-2.csr,30d

            Examples:
              tokentool ca provision --dir ca --csv devices.csv --validity 365d \\
                  --by ops@example.com --out certs
            """)

    @Option(help: "CA directory made by tokentool ca init.")
    var dir: String

    @Option(help: "The devices: a CSV with columns deviceID, csr and optionally validity.")
    var csv: String

    @Option(help: "Validity of rows that state none: seconds, or a number with s, m, h or d (at most 825 days).")
    var validity: ValiditySpan?

    @Option(help: "Who provisions the devices (recorded in the ledger).")
    var by: String

    @Option(help: "Directory for the certificates (made if missing; existing files are never overwritten).")
    var out: String

    @OptionGroup(title: "CA key passphrase") var passphrase: PassphraseOptions

    @OptionGroup(title: "Ledger") var store: StoreOption

    struct Device: Sendable {
        let row: Int
        let deviceID: String
        let csr: ValidatedCSR
        let validity: TimeInterval
    }

    /// The devices of the CSV, every row and CSR checked; a usage error names the first bad row.
    func devices() throws -> [Device] {
        let text = String(decoding: try Input.read(csv), as: UTF8.self)
        let base = URL(fileURLWithPath: csv).deletingLastPathComponent()
        var lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard !lines.isEmpty else { throw CLIExit.usage("\(csv) is empty: it needs a header line (deviceID,csr[,validity]) and a row per device") }
        let header = lines.removeFirst().split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard let idColumn = header.firstIndex(of: "deviceID"), let csrColumn = header.firstIndex(of: "csr") else {
            throw CLIExit.usage("\(csv): the header line must name the columns deviceID and csr (and optionally validity)")
        }
        let validityColumn = header.firstIndex(of: "validity")
        guard !lines.isEmpty else { throw CLIExit.usage("\(csv) lists no device") }
        var seen = Set<String>()
        var devices: [Device] = []
        for (index, line) in lines.enumerated() {
            let row = index + 2
            guard !line.contains("\"") else { throw CLIExit.usage("\(csv) line \(row): quoted fields are not read") }
            let fields = line.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard fields.count == header.count else { throw CLIExit.usage("\(csv) line \(row): \(fields.count) fields, the header has \(header.count)") }
            let deviceID = fields[idColumn]
            let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@-")
            guard !deviceID.isEmpty, deviceID.utf8.count <= 64, !deviceID.hasPrefix("."), deviceID.allSatisfy(allowed.contains) else {
                throw CLIExit.usage("\(csv) line \(row): the device ID must be 1 to 64 of A-Z a-z 0-9 . _ @ - (not starting with a dot)")
            }
            guard seen.insert(deviceID).inserted else { throw CLIExit.usage("\(csv) line \(row): device \(deviceID) is listed twice") }
            var span = validity?.seconds
            if let column = validityColumn, !fields[column].isEmpty {
                guard let given = ValiditySpan.parse(fields[column]) else {
                    throw CLIExit.usage("\(csv) line \(row): validity \"\(fields[column].prefix(20))\" is not seconds or a number with s, m, h or d")
                }
                span = given
            }
            guard let span else { throw CLIExit.usage("\(csv) line \(row): no validity (give the column or --validity)") }
            let path = fields[csrColumn].hasPrefix("/") ? fields[csrColumn] : base.appendingPathComponent(fields[csrColumn]).path
            let request = try Input.read(path)
            let csr: ValidatedCSR
            do throws(PeerCAError) { csr = try ValidatedCSR(request) } catch {
                throw CLIExit.usage("\(csv) line \(row): \(path): \(error.message)")
            }
            devices.append(Device(row: row, deviceID: deviceID, csr: csr, validity: span))
        }
        return devices
    }

    func run() async throws {
        let devices = try devices()
        let outDirectory = out
        let operatorName = by
        do {
            try FileManager.default.createDirectory(atPath: outDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw CLIExit.usage("--out \(outDirectory) cannot be made: \(error.localizedDescription)")
        }
        let files = devices.map { (outDirectory as NSString).appendingPathComponent("\($0.deviceID).pem") }
        if let taken = files.first(where: { FileManager.default.fileExists(atPath: $0) }) {
            throw CLIExit.usage("\(taken) exists; tokentool never overwrites certificates")
        }
        try await CADeployment(directory: dir).withCA(passphrase: passphrase, store: store, issuing: true) { ca in
            var issued: [IssuedCertificate] = []
            func undo(_ why: String) async -> CLIExit {
                var left: [String] = []
                for certificate in issued {
                    do throws(PeerCAError) { _ = try await ca.revoke(serial: certificate.serial, reason: .cessationOfOperation) } catch {
                        left.append(certificate.serial)
                    }
                }
                let revoked = issued.count - left.count
                let tail = left.isEmpty ? "" : "; NOT revoked (do it by hand: tokentool ca revoke): \(left.joined(separator: " "))"
                return CLIExit(code: 2, message: "\(why); nothing was written, and the \(revoked) certificates issued in this run were revoked\(tail)")
            }
            for device in devices {
                do throws(PeerCAError) {
                    issued.append(try await ca.issueManual(deviceID: device.deviceID, csr: device.csr, validity: device.validity, by: operatorName))
                } catch {
                    throw await undo("line \(device.row) (\(device.deviceID)): REFUSED \(error.code.rawValue): \(error.message)")
                }
            }
            do throws(SecureFileError) {
                try SecureFile.writeAllNew(zip(files, issued).map { SecureFile.NewFile(path: $0, contents: Array($1.chainPEM.utf8), mode: 0o644) })
            } catch {
                throw await undo("the certificates cannot be written: \(error.message)")
            }
            Output.json(.array(zip(devices, zip(files, issued)).map { device, pair in
                .object([
                    "deviceID": .string(device.deviceID), "serial": .string(pair.1.serial), "notAfter": .string(ISO8601Text.string(pair.1.notAfter)),
                    "file": .string(pair.0),
                ])
            }))
            printError("provisioned \(issued.count) devices into \(outDirectory)")
        }
    }
}
