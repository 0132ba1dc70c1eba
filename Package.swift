// swift-tools-version:6.1
import PackageDescription

let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "tokentool",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "TokenKit", targets: ["TokenKit"]),
        .library(name: "PDAKeys", targets: ["PDAKeys"]),
        .library(name: "PeerCA", targets: ["PeerCA"]),
        .library(name: "PeerCAPostgres", targets: ["PeerCAPostgres"]),
        .library(name: "TokenServer", targets: ["TokenServer"]),
        .executable(name: "tokentool", targets: ["tokentool"]),
        .executable(name: "tokenbench", targets: ["tokenbench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
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
        .target(
            name: "TokenKit",
            dependencies: ["COpenSSL", "CLibJWT"],
            swiftSettings: strictSettings
        ),
        .target(
            name: "PDAKeys",
            dependencies: [
                "TokenKit",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "PeerCA",
            dependencies: [
                "TokenKit",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "PeerCAPostgres",
            dependencies: [
                "PeerCA",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .target(
            name: "TokenServer",
            dependencies: [
                "TokenKit", "PDAKeys", "PeerCA", "PeerCAPostgres",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "tokentool",
            dependencies: [
                "TokenKit", "PDAKeys", "PeerCA", "PeerCAPostgres", "TokenServer",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
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
                "TokenKit", "PeerCA", "COpenSSL", "CAllocCounter",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/tokenbench",
            swiftSettings: strictSettings
        ),
        .target(
            name: "TestSupport",
            dependencies: ["TokenKit"],
            path: "Tests/TestSupport",
            exclude: ["keyserver.py", "openweb_server.py"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenKitTests",
            dependencies: ["TokenKit", "PDAKeys", "PeerCA", "TestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "PDAKeysTests",
            dependencies: [
                "PDAKeys", "TokenKit", "TestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenServerTests",
            dependencies: [
                "TokenServer", "PeerCA", "TokenKit", "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "LedgerTests",
            dependencies: [
                "PeerCA", "PeerCAPostgres", "TestSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "PeerCATests",
            dependencies: [
                "PeerCA", "TokenKit", "TestSupport",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strictSettings
        ),
        // The CLI run as a process (tokentoolExecutable): the only test target that builds the
        // tokentool executable: the library test targets do not depend on it.
        .testTarget(
            name: "tokentoolTests",
            dependencies: ["tokentool", "TestSupport", "TokenKit", "PDAKeys", "PeerCA"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
