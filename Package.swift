// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "wearbloom-fleet",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "dispatcher", targets: ["Dispatcher"]),
        .executable(name: "render-worker", targets: ["RenderWorker"]),
        .executable(name: "image-worker", targets: ["ImageWorker"]),
        .executable(name: "fleet-bench", targets: ["FleetBench"]),
        .executable(name: "fleet-drill", targets: ["FleetDrill"]),
        .executable(name: "fleet-demo", targets: ["FleetDemo"]),
        .library(name: "DispatcherProtocol", targets: ["DispatcherProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
    ],
    targets: [
        // System libraries, found by their pkg-config names (Debian's -dev packages).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CVips", pkgConfig: "vips", providers: [.apt(["libvips-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        // Fixed-argument wrappers for the variadic C calls Swift cannot make.
        .target(name: "CFleetShims", dependencies: ["CVips", "CCurl"]),

        // The layers under Sources/Shared, lowest first; each imports only the layers below it
        // (docs/architecture.md).
        // Small helpers every layer uses: blocking work off the cooperative pool, child processes, hex.
        .target(name: "FleetSupport", path: "Sources/Shared/FleetSupport"),
        // libpq: connections, the pool, LISTEN, migrations. Imports nothing of ours.
        .target(
            name: "FleetPostgres",
            dependencies: ["CLibPQ", .product(name: "Logging", package: "swift-log")],
            path: "Sources/Shared/FleetPostgres"
        ),
        // The outbound HTTP client (libcurl's multi interface) every provider client uses.
        .target(name: "FleetHTTPClient", dependencies: ["CCurl", "CFleetShims", "FleetSupport"], path: "Sources/Shared/FleetHTTPClient"),
        // Where images live: storage keys and ids, the local store, atomic files.
        .target(name: "FleetStorage", dependencies: ["FleetSupport"], path: "Sources/Shared/FleetStorage"),
        // The job queue: jobs and their driver, the worker runtime, the queue's maintenance, the
        // cron-style schedule. Knows no product: each kind's handler lives with its domain.
        .target(
            name: "FleetQueue",
            dependencies: [
                "FleetSupport", "FleetPostgres",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Sources/Shared/FleetQueue"
        ),
        // The image work: libvips normalise and cut-out composition, the background removers
        // (Replicate, rembg, libvips), the image jobs' payloads.
        .target(
            name: "Imaging",
            dependencies: [
                "FleetSupport", "FleetHTTPClient", "FleetStorage", "CVips", "CFleetShims",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            path: "Sources/Shared/Imaging"
        ),
        // Renders: requests and their credits, the render store, the try-on providers (fal, Google,
        // local), provider webhooks' verification, onboarding tokens, the render sweeps.
        .target(
            name: "Renders",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetQueue", "Imaging", "CSodium",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            path: "Sources/Shared/Renders"
        ),
        // The dispatcher's socket protocol: wire types, frames, the Swift client. No domain
        // imports: a backend links it without libpq, libvips or libcurl.
        .target(
            name: "DispatcherProtocol",
            dependencies: [
                "FleetSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Sources/Shared/DispatcherProtocol"
        ),

        // The HTTP listener every executable runs (FLEET_HTTP_ADDRESS): probes, Prometheus metrics.
        .target(
            name: "FleetHTTP",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // What every executable does at start: settings, JSON logs, the HTTP listener with probes
        // and metrics, migrations, the worker's run loop under a ServiceGroup.
        .target(
            name: "FleetRuntime",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetQueue", "FleetHTTP",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Sources/Shared/FleetRuntime"
        ),
        // The dispatcher's socket server (protocol, operations), a library so tests can run it in-process.
        .target(
            name: "DispatcherCore",
            dependencies: [
                "FleetHTTPClient", "FleetPostgres", "FleetStorage", "FleetSupport", "FleetQueue", "CSodium", "FleetHTTP", "Imaging", "Renders", "DispatcherProtocol",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "FleetCommands",
            dependencies: [ "FleetRuntime","FleetQueue", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "Dispatcher",
            dependencies: [ "FleetRuntime","FleetHTTPClient", "FleetPostgres", "FleetSupport", "FleetQueue", "DispatcherCore", "FleetCommands", "FleetHTTP", "Renders", "DispatcherProtocol", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "RenderWorker",
            dependencies: [ "FleetRuntime",
                "FleetHTTPClient", "FleetPostgres", "FleetStorage", "FleetSupport", "FleetCommands", "FleetQueue", "Imaging", "Renders", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "ImageWorker",
            dependencies: [ "FleetRuntime",
                "FleetHTTPClient", "FleetStorage", "FleetSupport", "FleetCommands", "FleetQueue", "Imaging", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "FleetDrill",
            dependencies: ["DrillKinds", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "FleetDemo",
            dependencies: [ "FleetRuntime","FleetPostgres", "FleetStorage", "FleetSupport", "Renders", "DispatcherProtocol", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "FleetBench",
            dependencies: [
                "FleetHTTPClient", "FleetPostgres", "FleetStorage", "FleetSupport", "FleetQueue", "FakeProviders", "DispatcherCore", "Imaging", "Renders", "DispatcherProtocol", "DrillKinds", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            exclude: ["peers"]
        ),
        // The synthetic kinds (drill.noop, drill.script) and their worker: load drills, the queue
        // benchmarks and the tests. No production worker links them.
        .target(
            name: "DrillKinds",
            dependencies: ["FleetSupport", "FleetQueue", "FleetRuntime"]
        ),
        // Fake provider servers (fal, Google, Replicate, rembg) on loopback speaking the real wire
        // formats: used by the tests and by fleet-bench's render suite.
        .target(
            name: "FakeProviders",
            dependencies: [
                "FleetHTTPClient", "CSodium", "Imaging",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "SharedTests",
            dependencies: [ "FleetRuntime",
                "FleetHTTPClient", "FleetPostgres", "FleetStorage", "FleetSupport", "FleetQueue", "CVips", "CFleetShims", "DrillKinds", "FleetDrill", "ImageWorker", "RenderWorker", "FakeProviders", "DispatcherCore", "FleetHTTP", "Imaging", "Renders", "DispatcherProtocol",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "RenderTests",
            dependencies: [
                "FleetHTTPClient", "FleetSupport", "FakeProviders", "CSodium", "Renders",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
    ]
)
