// swift-tools-version:6.1
import PackageDescription

// The layers under Sources/Shared, lowest first; each imports only the layers below it and the
// compiler keeps it so (docs/architecture.md draws them):
//
//   FleetSupport                       helpers every layer uses
//   FleetPostgres  FleetHTTPClient  FleetStorage  FleetHTTP
//   FleetObjectStore                   (FleetHTTPClient, FleetStorage: the S3 client and image store)
//   FleetQueue                         (FleetPostgres)
//   Imaging                            (FleetQueue for its jobs' kinds, FleetHTTPClient, FleetStorage)
//   Providers                          (FleetHTTPClient, Imaging for the local composite: no queue, no render store)
//   RenderLedger                       (FleetQueue, Imaging: the credit ledger's statements, an account's erasure)
//   Renders                            (FleetQueue, Imaging, Providers, RenderLedger, FleetPostgres, FleetHTTPClient, FleetStorage)
//   FleetCallbacks                     (FleetQueue for its jobs' kinds, FleetHTTPClient)
//   DispatcherProtocol                 (FleetSupport only: no domain)
//   FleetAccess                        (FleetPostgres, DispatcherProtocol for the roles)
//   RenderSchema CallbackSchema AccessSchema   (each owner's migrations alone, in its Migrations/ folder)
//   FleetSchema                        (every owner's migrations: FleetQueue, LiveSettings, the three above; SQL only)
//   FleetTracing                       (FleetHTTPClient: the tracer and its OTLP/HTTP exporter)
//   FleetRuntime                       (FleetQueue, FleetPostgres, FleetHTTP, FleetTracing, FleetStorage: no domain;
//                                       each executable hands it FleetSchema)
//
// Above them: DispatcherCore (the dispatcher's server), FleetCommands (the workers' shared CLI),
// the executables, and the test support (DrillKinds, FakeProviders).

let log = Target.Dependency.product(name: "Logging", package: "swift-log")
let metrics = Target.Dependency.product(name: "Metrics", package: "swift-metrics")
let serviceLifecycle = Target.Dependency.product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let nioCore = Target.Dependency.product(name: "NIOCore", package: "swift-nio")
let nioPosix = Target.Dependency.product(name: "NIOPosix", package: "swift-nio")
let nioSSL = Target.Dependency.product(name: "NIOSSL", package: "swift-nio-ssl")
let hummingbird = Target.Dependency.product(name: "Hummingbird", package: "hummingbird")
let prometheus = Target.Dependency.product(name: "Prometheus", package: "swift-prometheus")
let crypto = Target.Dependency.product(name: "Crypto", package: "swift-crypto")
let cryptoExtras = Target.Dependency.product(name: "_CryptoExtras", package: "swift-crypto")
let mustache = Target.Dependency.product(name: "Mustache", package: "swift-mustache")
let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")
let tracing = Target.Dependency.product(name: "Tracing", package: "swift-distributed-tracing")

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
        // What a Swift backend links to talk to the dispatcher: no libpq, libvips or libcurl.
        .library(name: "DispatcherProtocol", targets: ["DispatcherProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        // System libraries, found by their pkg-config names (Debian's -dev packages).
        .systemLibrary(name: "CLibPQ", path: "Sources/Shared/CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CVips", path: "Sources/Shared/CVips", pkgConfig: "vips", providers: [.apt(["libvips-dev"])]),
        .systemLibrary(name: "CCurl", path: "Sources/Shared/CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CSodium", path: "Sources/Shared/CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        // Fixed-argument wrappers for the variadic C calls Swift cannot make.
        .target(name: "CCurlShims", dependencies: ["CCurl"], path: "Sources/Shared/CCurlShims"),
        .target(name: "CVipsShims", dependencies: ["CVips"], path: "Sources/Shared/CVipsShims"),
        // glibc's posix_spawn action that closes every inherited descriptor, declared only under _GNU_SOURCE.
        .target(name: "CSpawnShims", path: "Sources/Shared/CSpawnShims"),

        // Helpers every layer uses: JSON values, coded errors, settings from the environment,
        // blocking work off the cooperative pool, child processes, trace context across processes.
        .target(name: "FleetSupport", dependencies: ["CSpawnShims", tracing], path: "Sources/Shared/FleetSupport"),
        // libpq: connections, the pool, the process's one LISTEN connection (Notifier), migrations.
        // Imports nothing of ours.
        .target(name: "FleetPostgres", dependencies: ["CLibPQ", log, serviceLifecycle], path: "Sources/Shared/FleetPostgres"),
        // The outbound HTTP client (libcurl's multi interface) every provider client uses.
        .target(name: "FleetHTTPClient", dependencies: ["FleetSupport", "CCurl", "CCurlShims", tracing], path: "Sources/Shared/FleetHTTPClient"),
        // Where images live: storage keys and ids, the local store, atomic files, the stores' growth
        // counters, and the groundwork of object storage (S3/: AWS Signature V4 and presigned URLs,
        // HMAC from swift-crypto).
        .target(name: "FleetStorage", dependencies: ["FleetSupport", crypto, metrics], path: "Sources/Shared/FleetStorage"),
        // Images in S3-compatible object storage: the S3 client (over FleetHTTPClient, signed by
        // FleetStorage's SigV4), `S3ImageStorage`, and the factory of a `StorageLocation`'s store.
        .target(name: "FleetObjectStore", dependencies: ["FleetSupport", "FleetHTTPClient", "FleetStorage", crypto], path: "Sources/Shared/FleetObjectStore"),
        // The settings operators change without a deploy (`fleet_settings`): render provider and
        // categories, image profiles.
        .target(name: "LiveSettings", dependencies: ["FleetPostgres"], path: "Sources/Shared/LiveSettings"),
        // The HTTP listener every executable runs (FLEET_HTTP_ADDRESS): probes, Prometheus metrics.
        .target(
            name: "FleetHTTP",
            dependencies: [hummingbird, prometheus, metrics, serviceLifecycle, log, nioCore],
            path: "Sources/Shared/FleetHTTP"
        ),
        // The job queue: jobs and their driver, the worker runtime, the queue's maintenance, the
        // cron-style schedule. Knows no product: each kind's handler lives with its domain.
        .target(
            name: "FleetQueue",
            dependencies: ["FleetSupport", "FleetPostgres", log, metrics, serviceLifecycle, tracing],
            path: "Sources/Shared/FleetQueue"
        ),
        // The image work: libvips normalise and cut-out composition, the background removers
        // (Replicate, rembg, libvips), the image jobs' payloads and handlers.
        .target(
            name: "Imaging",
            dependencies: ["FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetQueue", "LiveSettings", "CVips", "CVipsShims", log, metrics],
            path: "Sources/Shared/Imaging"
        ),
        // The try-on providers: fal (FASHN, Nano Banana Pro), Google Virtual Try-On and the offline
        // `local` composite (libvips, through Imaging), their HTTP, OAuth and webhook signatures,
        // and the values they share with the renders (categories, error codes, a default limit).
        // Knows neither the queue nor the render store.
        .target(
            name: "Providers",
            dependencies: ["FleetSupport", "FleetHTTPClient", "Imaging", "CSodium", crypto, cryptoExtras, metrics],
            path: "Sources/Shared/Providers"
        ),
        // Renders: requests and their credits, the render store, the render run (`render.run`'s handler),
        // onboarding tokens, the render sweeps; the providers it calls are `Providers`.
        .target(
            name: "Renders",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetQueue", "Imaging", "Providers", "LiveSettings", "RenderLedger",
                "CSodium", log, metrics, serviceLifecycle, tracing,
            ],
            path: "Sources/Shared/Renders",
            exclude: ["Migrations", "Ledger"]
        ),
        // Every statement that moves a credit (`CreditLedger`), and an account's erasure, which the
        // image worker's `account.purge` runs: below Renders, so that the image worker links no render
        // code, provider or libsodium.
        .target(
            name: "RenderLedger",
            dependencies: ["FleetPostgres", "FleetQueue", "FleetStorage", "Imaging"],
            path: "Sources/Shared/Renders/Ledger"
        ),
        // The renders' and credits' tables: their migrations alone, so that a process migrating
        // the schema links no render code.
        .target(name: "RenderSchema", dependencies: ["FleetPostgres", "FleetQueue"], path: "Sources/Shared/Renders/Migrations"),
        // Calling out: signed completion callbacks (`callback.deliver`) and HTTP jobs (`http.request`),
        // the outbound allow-list and its SSRF checks, Standard Webhooks signing.
        .target(
            name: "FleetCallbacks",
            dependencies: ["FleetSupport", "FleetQueue", "FleetHTTPClient", crypto],
            path: "Sources/Shared/FleetCallbacks",
            exclude: ["Migrations"]
        ),
        // The callbacks' triggers: their migrations alone.
        .target(name: "CallbackSchema", dependencies: ["FleetPostgres", "FleetQueue"], path: "Sources/Shared/FleetCallbacks/Migrations"),
        // The dispatcher's socket protocol: wire types, frames, settings, the Swift client.
        .target(name: "DispatcherProtocol", dependencies: ["FleetSupport", nioCore, nioPosix, nioSSL], path: "Sources/Shared/DispatcherProtocol"),
        // Who may do what: access tokens and their roles, the console's sessions and login key;
        // their tables and migrations.
        .target(
            name: "FleetAccess",
            dependencies: ["FleetSupport", "FleetPostgres", "DispatcherProtocol", "CSodium", log, serviceLifecycle],
            path: "Sources/Shared/FleetAccess",
            exclude: ["Migrations"]
        ),
        // The access tables: their migrations alone (no libsodium).
        .target(name: "AccessSchema", dependencies: ["FleetPostgres"], path: "Sources/Shared/FleetAccess/Migrations"),
        // The whole schema: every owner's migrations, in the order the runner applies them. SQL only:
        // each executable hands it to the runtime without linking the owners' code.
        .target(
            name: "FleetSchema",
            dependencies: ["FleetPostgres", "FleetQueue", "LiveSettings", "CallbackSchema", "RenderSchema", "AccessSchema"],
            path: "Sources/Shared/FleetSchema"
        ),
        // Traces: the tracer (sampling, spans, W3C traceparent), its bounded buffer of finished spans
        // and the exporter service that sends them as OTLP/HTTP (protobuf or JSON, encoded here).
        .target(
            name: "FleetTracing",
            dependencies: ["FleetSupport", "FleetHTTPClient", log, serviceLifecycle, tracing],
            path: "Sources/Shared/FleetTracing"
        ),
        // What every executable does at start: settings, JSON logs, traces (OTLP/HTTP when asked), the
        // HTTP listener with probes and metrics, migrations, the worker's run loop under a ServiceGroup.
        .target(
            name: "FleetRuntime",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetQueue", "FleetHTTP", "FleetTracing",
                log, prometheus, serviceLifecycle, tracing,
            ],
            path: "Sources/Shared/FleetRuntime"
        ),

        // The dispatcher's server (socket, operations, webhooks, schedule, the operator console), a library so tests
        // run it in-process.
        .target(
            name: "DispatcherCore",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetHTTP", "FleetQueue", "Imaging", "Renders", "Providers",
                "FleetCallbacks", "DispatcherProtocol", "FleetAccess", "CSodium", hummingbird, mustache, nioCore, nioPosix, nioSSL, log, metrics, serviceLifecycle, tracing,
            ],
            path: "Sources/Shared/DispatcherCore"
        ),
        // The workers' shared command line (run, migrate).
        .target(name: "FleetCommands", dependencies: ["FleetPostgres", "FleetQueue", "FleetRuntime", "FleetSchema", "FleetStorage", argumentParser, log], path: "Sources/Shared/FleetCommands"),
        .executableTarget(
            name: "Dispatcher",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetHTTP", "FleetQueue", "FleetStorage", "FleetObjectStore", "Imaging", "Renders", "Providers", "DispatcherProtocol",
                "FleetCallbacks", "FleetAccess", "FleetRuntime", "FleetSchema", "DispatcherCore", "FleetCommands", argumentParser, log, serviceLifecycle,
            ]
        ),
        .executableTarget(
            name: "RenderWorker",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetObjectStore", "FleetQueue", "Imaging", "Renders", "Providers",
                "FleetRuntime", "FleetCommands", argumentParser, log,
            ]
        ),
        .executableTarget(
            name: "ImageWorker",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetObjectStore", "FleetQueue", "Imaging", "RenderLedger",
                "FleetRuntime", "FleetCommands", argumentParser, log,
            ]
        ),
        .executableTarget(name: "FleetDrill", dependencies: ["DrillKinds", argumentParser]),
        .executableTarget(
            name: "FleetDemo",
            dependencies: ["FleetSupport", "FleetPostgres", "FleetStorage", "FleetObjectStore", "Renders", "Providers", "DispatcherProtocol", "FleetRuntime", argumentParser]
        ),
        .executableTarget(
            name: "FleetBench",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetObjectStore", "FleetQueue", "Imaging", "Renders", "Providers",
                "DispatcherProtocol", "DispatcherCore", "DrillKinds", "FakeProviders", "FleetAccess", "FleetSchema", argumentParser, hummingbird, log,
                nioCore, nioPosix,
            ],
            exclude: ["peers"]
        ),

        // Test support, linked by no production executable.
        // The synthetic kinds (drill.noop, drill.script) and their worker: load drills, the queue
        // benchmarks and the tests.
        .target(name: "DrillKinds", dependencies: ["FleetSupport", "FleetQueue", "FleetRuntime", "FleetSchema"], path: "Sources/Shared/DrillKinds"),
        // Fake provider servers (fal, Google, Replicate, rembg) on loopback speaking the real wire
        // formats, and a proxy that counts and faults S3 requests: used by the tests and by fleet-bench.
        .target(
            name: "FakeProviders",
            dependencies: ["FleetHTTPClient", "FleetStorage", "FleetSupport", "Imaging", "CSodium", hummingbird, nioCore, nioPosix, crypto, cryptoExtras, log, serviceLifecycle],
            path: "Sources/Shared/FakeProviders"
        ),
        // What the test targets share: a test database per test on the shared cluster (`TestQueue`),
        // PgBouncer and standbys, the built executables as processes (`WorkerProcess`,
        // `DispatcherProcess`), the in-process dispatcher (`TestDispatcher`), the render fixture,
        // the S3 gateway, test images. A test target itself, holding no tests: so only
        // `--build-tests` builds it (a regular target would be built by `swift build -c release`
        // too, where its `@testable` imports cannot compile), and the tests import it `@testable`.
        // No test target depends on an executable: the tests that run one (`fleet-drill`, the
        // workers) start the built binary (`builtExecutable`), which `swift build --build-tests`
        // builds with every other product.
        .testTarget(
            name: "FleetTestSupport",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetHTTP", "FleetQueue", "Imaging", "Renders", "Providers",
                "FleetCallbacks", "DispatcherProtocol", "FleetAccess", "FleetSchema", "DispatcherCore", "DrillKinds", "FakeProviders",
                .product(name: "MetricsTestKit", package: "swift-metrics"), prometheus, log, metrics, nioCore, nioPosix, serviceLifecycle,
            ],
            path: "Tests/FleetTestSupport"
        ),
        // The tests, one target per module (`swift test --filter FleetQueueTests` runs one); on Linux
        // they link into one test bundle. UnitTests: values (state machines, parsers, signers,
        // ledgers), no database, process or network: seconds. The others run against PostgreSQL,
        // processes and fake servers (docs/architecture.md, "Tests").
        .testTarget(
            name: "UnitTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetStorage", "FleetHTTP", "FleetQueue", "Providers", "Renders", "FleetCallbacks",
                "DispatcherProtocol", "DispatcherCore", "FleetRuntime", "FleetSchema", "RenderSchema", "CallbackSchema", "FleetTestSupport",
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"), log, nioCore, tracing,
            ]
        ),
        .testTarget(
            name: "FleetQueueTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetQueue", "Providers", "Renders", "DispatcherCore", "DrillKinds", "FakeProviders", "FleetTestSupport",
                log, serviceLifecycle,
            ]
        ),
        .testTarget(
            name: "FleetPostgresTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetQueue", "Imaging", "Providers", "Renders", "FleetCallbacks", "DispatcherProtocol",
                "DispatcherCore", "FleetSchema", "DrillKinds", "FakeProviders", "FleetTestSupport",
            ]
        ),
        .testTarget(
            name: "RendersTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetQueue", "Imaging", "Providers", "Renders", "RenderLedger", "FleetCallbacks",
                "DispatcherProtocol", "FleetAccess", "DispatcherCore", "FakeProviders", "FleetTestSupport", log,
            ]
        ),
        .testTarget(
            name: "ProvidersTests",
            dependencies: ["FleetSupport", "FleetHTTPClient", "Renders", "Providers", "FakeProviders", "CSodium", hummingbird, crypto, cryptoExtras]
        ),
        .testTarget(
            name: "ImagingTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetQueue", "Imaging", "Providers", "Renders", "RenderLedger",
                "DispatcherProtocol", "FleetSchema", "FakeProviders", "CVips", "CVipsShims", "FleetTestSupport",
                .product(name: "MetricsTestKit", package: "swift-metrics"), log, metrics,
            ]
        ),
        .testTarget(
            name: "FleetStorageTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetObjectStore", "FleetQueue", "Imaging", "Providers", "Renders",
                "DispatcherProtocol", "FakeProviders", "FleetTestSupport", log,
            ]
        ),
        .testTarget(
            name: "DispatcherCoreTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetHTTP", "FleetQueue", "Imaging", "Renders",
                "DispatcherProtocol", "FleetAccess", "FleetSchema", "DispatcherCore", "FleetTestSupport", log, nioCore, nioPosix, serviceLifecycle,
            ]
        ),
        .testTarget(
            name: "FleetCallbacksTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetStorage", "FleetQueue", "Renders", "FleetCallbacks", "DispatcherProtocol", "DispatcherCore",
                "FakeProviders", "FleetTestSupport",
            ]
        ),
        .testTarget(
            name: "FleetRuntimeTests",
            dependencies: [
                "FleetSupport", "FleetPostgres", "FleetHTTPClient", "FleetStorage", "FleetHTTP", "FleetQueue", "Providers", "Renders", "FleetRuntime",
                "DispatcherCore", "DrillKinds", "FakeProviders", "FleetTestSupport", log, serviceLifecycle,
            ]
        ),
        .testTarget(
            name: "FleetTracingTests",
            dependencies: [
                "FleetSupport", "FleetHTTPClient", "FleetQueue", "Providers", "Renders", "DispatcherProtocol", "FleetTracing", "DrillKinds",
                "FakeProviders", "FleetTestSupport", log, serviceLifecycle, tracing,
            ]
        ),
        .testTarget(
            name: "FleetHTTPClientTests",
            dependencies: ["FleetHTTPClient", "FakeProviders", "FleetTestSupport", hummingbird]
        ),
    ]
)
