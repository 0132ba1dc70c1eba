// swift-tools-version:6.1
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

// Package traits decide which external packages a package that depends on this one resolves and
// builds. The default trait enables all of them, so `swift build`, `swift test` and `swift run
// tokentool` here work as before. A package that only verifies tokens writes `traits: []` on its
// `.package(url: …)` line (TokenKit needs no external package) or `traits: ["PDAKeys"]`. Every
// external product a target uses is guarded by one of these conditions: SwiftPM leaves a package
// dependency out of resolution only when no target uses it unguarded, so one unguarded
// `.product(…)` brings its package back for every user (scripts/light_consumer.sh checks it).
let pda: TargetDependencyCondition? = .when(traits: ["PDAKeys"])
let peerCA: TargetDependencyCondition? = .when(traits: ["PeerCA"])
let postgres: TargetDependencyCondition? = .when(traits: ["PeerCAPostgres"])
let peerClient: TargetDependencyCondition? = .when(traits: ["PeerClient"])
let server: TargetDependencyCondition? = .when(traits: ["TokenServer"])

let package = Package(
    name: "tokentool",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "TokenKit", targets: ["TokenKit"]),
        .library(name: "PDAKeys", targets: ["PDAKeys"]),
        .library(name: "PeerCA", targets: ["PeerCA"]),
        .library(name: "PeerCAPostgres", targets: ["PeerCAPostgres"]),
        .library(name: "PeerClient", targets: ["PeerClient"]),
        .library(name: "TokenServer", targets: ["TokenServer"]),
        .executable(name: "tokentool", targets: ["tokentool"]),
        .executable(name: "tokenbench", targets: ["tokenbench"]),
    ],
    traits: [
        .trait(
            name: "PDAKeys",
            description: "The PDAKeys library (async-http-client, SwiftNIO, NIOSSL, swift-log, swift-metrics)."),
        .trait(
            name: "PeerCA",
            description: "The PeerCA library (swift-certificates, swift-crypto, GRDB, SwiftNIO, swift-log)."),
        .trait(
            name: "PeerCAPostgres",
            description: "The PeerCAPostgres ledger (postgres-nio, swift-service-lifecycle).",
            enabledTraits: ["PeerCA"]),
        .trait(
            name: "PeerClient",
            description: "The PeerClient library, a device's half (async-http-client, SwiftNIO, NIOSSL, and PeerCA's).",
            enabledTraits: ["PeerCA"]),
        .trait(
            name: "TokenServer",
            description: "The TokenServer library, the tokentool CLI, tokenbench and the tests (everything).",
            enabledTraits: ["PDAKeys", "PeerCA", "PeerCAPostgres", "PeerClient"]),
        .default(enabledTraits: ["TokenServer"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        .systemLibrary(
            name: "CLibJWT",
            pkgConfig: "libjwt",
            providers: [.apt(["libjwt-dev"])]
        ),
        // The system OpenSSL initialised before main without its exit-time cleanup, which crashed
        // processes whose threads were leaving or inside OpenSSL as they exited.
        .target(
            name: "COpenSSLProcess",
            dependencies: ["COpenSSL"],  // its pkg-config paths (headers, libcrypto) where they are not the system's
            linkerSettings: [.linkedLibrary("crypto")]
        ),
        .target(
            name: "TokenKit",
            dependencies: ["COpenSSL", "CLibJWT", "COpenSSLProcess"],
            swiftSettings: strictSettings
        ),
        .target(
            name: "PDAKeys",
            dependencies: [
                "TokenKit",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: pda),
                .product(name: "NIOCore", package: "swift-nio", condition: pda),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: pda),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: pda),
                .product(name: "Logging", package: "swift-log", condition: pda),
                .product(name: "Metrics", package: "swift-metrics", condition: pda),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "PeerCA",
            dependencies: [
                "TokenKit",
                .product(name: "X509", package: "swift-certificates", condition: peerCA),
                .product(name: "SwiftASN1", package: "swift-asn1", condition: peerCA),
                .product(name: "Crypto", package: "swift-crypto", condition: peerCA),
                .product(name: "_CryptoExtras", package: "swift-crypto", condition: peerCA),
                .product(name: "GRDB", package: "GRDB.swift", condition: peerCA),
                .product(name: "GRDBSQLite", package: "GRDB.swift", condition: peerCA),
                .product(name: "NIOCore", package: "swift-nio", condition: peerCA),
                .product(name: "NIOTLS", package: "swift-nio", condition: peerCA),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: peerCA),
                .product(name: "Logging", package: "swift-log", condition: peerCA),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "PeerCAPostgres",
            dependencies: [
                "TokenKit", "PeerCA",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: postgres),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: postgres),
                .product(name: "NIOCore", package: "swift-nio", condition: postgres),
                .product(name: "Logging", package: "swift-log", condition: postgres),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "PeerClient",
            dependencies: [
                "TokenKit", "PeerCA",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: peerClient),
                .product(name: "NIOCore", package: "swift-nio", condition: peerClient),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: peerClient),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: peerClient),
                .product(name: "X509", package: "swift-certificates", condition: peerClient),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "TokenServer",
            dependencies: [
                "TokenKit", "PDAKeys", "PeerCA", "PeerCAPostgres",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: server),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: server),
                .product(name: "Hummingbird", package: "hummingbird", condition: server),
                .product(name: "HummingbirdCore", package: "hummingbird", condition: server),
                .product(name: "HummingbirdTLS", package: "hummingbird", condition: server),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: server),
                .product(name: "UnixSignals", package: "swift-service-lifecycle", condition: server),
                .product(name: "Prometheus", package: "swift-prometheus", condition: server),
                .product(name: "Metrics", package: "swift-metrics", condition: server),
                .product(name: "Logging", package: "swift-log", condition: server),
                .product(name: "HTTPTypes", package: "swift-http-types", condition: server),
                .product(name: "NIOCore", package: "swift-nio", condition: server),
                .product(name: "NIOPosix", package: "swift-nio", condition: server),
                .product(name: "NIOExtras", package: "swift-nio-extras", condition: server),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras", condition: server),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: server),
                .product(name: "Crypto", package: "swift-crypto", condition: server),
            ],
            swiftSettings: strictSettings
        ),
        // C's standard streams for the CLI (Swift 6 refuses the `stdout` global; FileHandle traps on a failed write).
        .target(name: "CStandardStreams"),
        .executableTarget(
            name: "tokentool",
            dependencies: [
                "TokenKit", "PDAKeys", "PeerCA", "PeerCAPostgres", "PeerClient", "TokenServer", "CStandardStreams",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: server),
                .product(name: "Metrics", package: "swift-metrics", condition: server),
                .product(name: "Prometheus", package: "swift-prometheus", condition: server),
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: server),
                .product(name: "Logging", package: "swift-log", condition: server),
                .product(name: "UnixSignals", package: "swift-service-lifecycle", condition: server),
                .product(name: "NIOCore", package: "swift-nio", condition: server),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: server),
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: server),
                .product(name: "NIOPosix", package: "swift-nio", condition: server),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: server),
                .product(name: "X509", package: "swift-certificates", condition: server),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "CAllocCounter",
            path: "Benchmarks/CAllocCounter"
        ),
        .executableTarget(
            name: "tokenbench",
            dependencies: [
                "TokenKit", "PeerCA", "PeerCAPostgres", "COpenSSL", "CAllocCounter",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: server),
                .product(name: "X509", package: "swift-certificates", condition: server),
                .product(name: "SwiftASN1", package: "swift-asn1", condition: server),
                // The issuance rows count the ledger's rows; --ledger-growth fills SQLite and PostgreSQL ledgers.
                .product(name: "GRDB", package: "GRDB.swift", condition: server),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: server),
                .product(name: "Logging", package: "swift-log", condition: server),
            ],
            path: "Benchmarks/tokenbench",
            swiftSettings: strictSettings
        ),
        // The webhook's floor for scripts/peer_load.sh: one bare Hummingbird route that reads the
        // body and answers a short JSON.
        .executableTarget(
            name: "bareroute",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird", condition: server),
                .product(name: "Logging", package: "swift-log", condition: server),
                .product(name: "UnixSignals", package: "swift-service-lifecycle", condition: server),
            ],
            path: "Benchmarks/bareroute",
            swiftSettings: strictSettings
        ),
        .target(
            name: "TestSupport",
            dependencies: ["TokenKit", "CTestProcess"],
            path: "Tests/TestSupport",
            exclude: ["keyserver.py", "openweb_server.py", "accept_log.py"],
            swiftSettings: strictSettings
        ),
        // Test-only: keeps Foundation's Process.run() clear of a buffer over-read in Swift 6.3's
        // swift-corelibs-foundation (see its header); in every test binary through TestSupport.
        .target(
            name: "CTestProcess",
            path: "Tests/CTestProcess"
        ),
        // Test-only: a probe of the system OpenSSL at the end of a process's exit, run in a new
        // process of the test binary (OpenSSLExitTests).
        .target(
            name: "CExitProbe",
            dependencies: ["COpenSSL"],
            path: "Tests/CExitProbe",
            linkerSettings: [.linkedLibrary("crypto")]
        ),
        .testTarget(
            name: "TokenKitTests",
            dependencies: ["TokenKit", "PDAKeys", "PeerCA", "TestSupport", "CExitProbe", "CTestProcess"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "PDAKeysTests",
            dependencies: [
                "PDAKeys", "TokenKit", "TestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: pda),
                .product(name: "Logging", package: "swift-log", condition: pda),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenServerTests",
            dependencies: [
                "TokenServer", "PeerCA", "TokenKit", "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: server),
                .product(name: "Hummingbird", package: "hummingbird", condition: server),
                .product(name: "HummingbirdTesting", package: "hummingbird", condition: server),
                .product(name: "Metrics", package: "swift-metrics", condition: server),
                .product(name: "MetricsTestKit", package: "swift-metrics", condition: server),
                .product(name: "Prometheus", package: "swift-prometheus", condition: server),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: server),
                .product(name: "Logging", package: "swift-log", condition: server),
                .product(name: "NIOCore", package: "swift-nio", condition: server),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: server),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: server),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "LedgerTests",
            dependencies: [
                "PeerCA", "PeerCAPostgres", "TestSupport",
                .product(name: "GRDB", package: "GRDB.swift", condition: postgres),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: postgres),
                .product(name: "Logging", package: "swift-log", condition: postgres),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "PeerCATests",
            dependencies: [
                "PeerCA", "TokenKit", "TestSupport",
                .product(name: "X509", package: "swift-certificates", condition: peerCA),
                .product(name: "NIOCore", package: "swift-nio", condition: peerCA),
                .product(name: "NIOPosix", package: "swift-nio", condition: peerCA),
                .product(name: "NIOEmbedded", package: "swift-nio", condition: peerCA),
                .product(name: "NIOTLS", package: "swift-nio", condition: peerCA),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: peerCA),
            ],
            swiftSettings: strictSettings
        ),
        // The CLI run as a process (tokentoolExecutable): the only test target that builds the
        // tokentool executable: the library test targets do not depend on it.
        .testTarget(
            name: "tokentoolTests",
            dependencies: [
                "tokentool", "TestSupport", "TokenKit", "PDAKeys", "PeerCA", "PeerClient",
                .product(name: "NIOCore", package: "swift-nio", condition: server),
                .product(name: "NIOPosix", package: "swift-nio", condition: server),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: server),
                .product(name: "NIOSSL", package: "swift-nio-ssl", condition: server),
            ],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
