// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "PortLoop",
    products: [
        .library(name: "PortLoop", targets: ["PortLoop"]),
        // Loop threads as swift-service-lifecycle services; a module of its own so that PortLoop needs neither.
        .library(name: "PortLoopServiceLifecycle", targets: ["PortLoopServiceLifecycle"]),
        .executable(name: "portloop-demo", targets: ["PortLoopDemo"]),
        .executable(name: "portloop-demo-ipc", targets: ["PortLoopDemoIPC"]),
        .executable(name: "portloop-echod", targets: ["PortLoopEchoDaemon"]),
        .executable(name: "portloop", targets: ["PortLoopCLI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // `make docs`: the DocC catalog Sources/PortLoop/PortLoop.docc (a command plugin; nothing links it).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // The Mach stand-in: ports, port sets, messages, timed receive.
        .target(
            name: "CPortLoop",
            path: "CShims",
            publicHeadersPath: "include",
            // pl_main_queue.c calls libdispatch's hooks for CoreFoundation.
            linkerSettings: [.linkedLibrary("dispatch")]
        ),
        .target(
            name: "PortLoop",
            dependencies: [
                "CPortLoop",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "PortLoopServiceLifecycle",
            dependencies: ["PortLoop", .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]
        ),
        // portloop-demo (`make demo`); Tests/PortLoopTests/DemoTests.swift runs it as a child process.
        .executableTarget(
            name: "PortLoopDemo",
            dependencies: ["PortLoop", "PortLoopDemoSupport",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // portloop-demo-ipc (`make demo-ipc`): an event server process and an app process whose main run loop
        // handles its events; Tests/PortLoopTests/DemoIPCTests.swift runs it as a child process.
        .executableTarget(
            name: "PortLoopDemoIPC",
            dependencies: ["PortLoop", "PortLoopDemoSupport",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // What the two demos share: the clock, formatting, threads (package access only).
        .target(name: "PortLoopDemoSupport"),
        // The example daemon: a dispatcher loop, worker loop threads, signals as a run loop source.
        // It imports CPortLoop only to name its client threads.
        .executableTarget(
            name: "PortLoopEchoDaemon",
            dependencies: ["PortLoop", "CPortLoop", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // The `portloop` command: services, ping, send, watch. Tests/PortLoopTests/CommandLine*.swift run it.
        .executableTarget(
            name: "PortLoopCLI",
            dependencies: ["PortLoop", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // A child process for the main-queue tests: a synchronous main that runs the main loop.
        .executableTarget(
            name: "PortLoopMainQueueCheck",
            dependencies: ["PortLoop"]
        ),
        // A child process for the experimental main executor under an async main. Swift 6.3 honours a program's
        // DefaultExecutorFactory only with availability checking off; not a product, so no user builds this flag.
        .executableTarget(
            name: "PortLoopAsyncMainCheck",
            dependencies: ["PortLoop"],
            swiftSettings: [.unsafeFlags(["-Xfrontend", "-disable-availability-checking"])]
        ),
        // A child process for the resource-exhaustion tests: it uses up its own descriptors.
        .executableTarget(
            name: "PortLoopResourceCheck",
            dependencies: ["PortLoop"]
        ),
        // A child process for the cross-process tests: a service or a client, in a namespace the test names.
        .executableTarget(
            name: "PortLoopIPCPeer",
            dependencies: ["PortLoop"]
        ),
        .testTarget(
            name: "PortLoopTests",
            dependencies: ["PortLoop", "CPortLoop", "PortLoopMainQueueCheck", "PortLoopIPCPeer", "PortLoopAsyncMainCheck", "PortLoopResourceCheck", "PortLoopEchoDaemon",
                           "PortLoopDemo", "PortLoopDemoIPC", "PortLoopCLI", "PortLoopServiceLifecycle",
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           .product(name: "Logging", package: "swift-log")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
