// swift-tools-version:6.1
// libFuzzer targets for TokenKit and PeerCA. Build and run with ../scripts/fuzz.sh (it passes
// -sanitize=fuzzer,address and -parse-as-library; libFuzzer provides main). A separate package so
// that a plain `swift build` of tokentool never tries to link them without libFuzzer.
import PackageDescription

let package = Package(
    name: "TokenKitFuzz",
    dependencies: [.package(name: "tokentool", path: ".."), .package(url: "https://github.com/apple/swift-log", from: "1.16.2")],
    targets: [
        .executableTarget(name: "FuzzToken", dependencies: [.product(name: "TokenKit", package: "tokentool")]),
        .executableTarget(name: "FuzzJWK", dependencies: [.product(name: "TokenKit", package: "tokentool")]),
        .executableTarget(name: "FuzzKeyFile", dependencies: [.product(name: "TokenKit", package: "tokentool")]),
        .executableTarget(
            name: "FuzzCSR",
            dependencies: [.product(name: "TokenKit", package: "tokentool"), .product(name: "PeerCA", package: "tokentool")]),
        .executableTarget(
            name: "FuzzWebhook",
            dependencies: [
                .product(name: "TokenKit", package: "tokentool"), .product(name: "PeerCA", package: "tokentool"),
                .product(name: "TokenServer", package: "tokentool"), .product(name: "Logging", package: "swift-log"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
