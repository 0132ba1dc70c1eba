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
        .executable(name: "tokentool", targets: ["tokentool"]),
        .executable(name: "tokenbench", targets: ["tokenbench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
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
        .executableTarget(
            name: "tokentool",
            dependencies: [
                "TokenKit",
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
                "TokenKit", "COpenSSL", "CAllocCounter",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/tokenbench",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "TokenKitTests",
            dependencies: ["TokenKit", "tokentool"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
