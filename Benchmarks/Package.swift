// swift-tools-version:6.0
// The PortLoop benchmarks: a separate package so that the library's own build and tests never compile
// them. Build and run from the repository root with
//   swift build -c release --package-path Benchmarks --scratch-path Benchmarks/.build-bench
//   Benchmarks/.build-bench/release/portloop-bench [--quick] [--json] [scenario ...]
import PackageDescription

let package = Package(
    name: "PortLoopBenchmarks",
    dependencies: [
        .package(name: "PortLoop", path: "../"),
    ],
    targets: [
        // Raw C floors: the same workloads written directly on eventfds and libevent, so that each
        // PortLoop figure can be read against what the kernel and libevent cost by themselves.
        .target(
            name: "CBenchFloors",
            path: "Sources/CBenchFloors",
            publicHeadersPath: "include",
            linkerSettings: [
                .linkedLibrary("event_core"),
                .linkedLibrary("event_pthreads"),
                .linkedLibrary("pthread"),
            ]
        ),
        .executableTarget(
            name: "portloop-bench",
            dependencies: [
                .product(name: "PortLoop", package: "PortLoop"),
                "CBenchFloors",
            ],
            path: "Sources/portloop-bench"
        ),
    ],
    swiftLanguageModes: [.v6]
)
