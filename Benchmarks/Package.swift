// swift-tools-version:6.1
// The PortLoop benchmarks: a separate package so that the library's own build and tests never compile
// them. Build and run from the repository root with
//   swift build -c release --package-path Benchmarks --scratch-path Benchmarks/.build-bench
//   Benchmarks/.build-bench/release/portloop-bench [--quick] [--json] [scenario ...]
import PackageDescription

let package = Package(
    name: "PortLoopBenchmarks",
    dependencies: [
        .package(name: "PortLoop", path: "../"),
        // A peer, for the benchmarks only: SwiftNIO's EventLoop (NIOPosix's MultiThreadedEventLoopGroup).
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // Peers across processes, for the benchmarks only: gRPC (its core and the HTTP/2 transport over NIO,
        // which serves Unix domain sockets too). Both need swift-tools-version 6.1.
        .package(url: "https://github.com/grpc/grpc-swift-2", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport", from: "2.9.2"),
        // Latency distributions (round trips, timer lateness) recorded as HdrHistograms, for the JSON and plots.
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
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
        // Measuring helpers: an allocation counter (malloc and its siblings defined in the executable, ELF
        // symbol interposition, no LD_PRELOAD, forwarding to glibc's __libc_*), heap and RSS figures, and
        // per-thread CPU time and context switches.
        .target(
            name: "CBenchSupport",
            path: "Sources/CBenchSupport",
            publicHeadersPath: "include"
        ),
        .executableTarget(
            name: "portloop-bench",
            dependencies: [
                .product(name: "PortLoop", package: "PortLoop"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                "CBenchFloors",
                "CBenchSupport",
            ],
            path: "Sources/portloop-bench",
            // CoreFoundation (a peer: CFRunLoop) lives in the toolchain's libFoundation on Linux.
            linkerSettings: [.linkedLibrary("Foundation")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
