// swift-tools-version:5.9
//
// Signoff for Swift: a human approval step between an AI agent and the tools it calls.
// The Rust core (crate `signoff`) is compiled into SignoffFFI.xcframework by
// ./build-xcframework.sh (on a Mac); Sources/Signoff holds the uniffi-generated bindings
// (Signoff.swift, checked for drift by ./test.sh) and the hand-written Swift API
// (Signoff+Swift.swift).

import PackageDescription

let package = Package(
    name: "Signoff",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [
        .library(name: "Signoff", targets: ["Signoff"]),
    ],
    targets: [
        // The Rust library (static, per platform) with the C header and module map of the
        // `SignoffFFI` clang module that Signoff.swift imports. Built locally by
        // ./build-xcframework.sh. For a release, upload SignoffFFI.xcframework.zip
        // (./build-xcframework.sh --zip prints its checksum) and use instead:
        //
        //   .binaryTarget(
        //       name: "SignoffFFI",
        //       url: "<where you publish the release>/SignoffFFI.xcframework.zip",
        //       checksum: "<output of `swift package compute-checksum SignoffFFI.xcframework.zip`>"
        //   ),
        .binaryTarget(name: "SignoffFFI", path: "SignoffFFI.xcframework"),
        .target(
            name: "Signoff",
            dependencies: ["SignoffFFI"],
            path: "Sources/Signoff"
        ),
        .testTarget(
            name: "SignoffTests",
            dependencies: ["Signoff"],
            path: "Tests/SignoffTests"
        ),
        // A child process for the recovery-after-a-crash tests in Tests/SignoffTests (macOS): it
        // leaves requests in a durable store and is killed. Not a product; `swift test` builds it
        // next to the test bundle (the tests skip themselves where it is not built).
        .executableTarget(
            name: "SignoffCrashHelper",
            dependencies: ["Signoff"],
            path: "Tests/SignoffCrashHelper"
        ),
    ]
)
