import FleetHTTPClient
import FleetObjectStore
import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Testing

extension StoreUnderTest {
    /// A fresh, empty store of this kind that fleet processes share: the store as the test reads
    /// it, the variables each process is given to keep its images there, and what no scrape of
    /// their metrics may name (the folder, or the bucket and prefix).
    func makeShared() async throws -> (storage: any ImageStorage, environment: [String: String], secrets: [String]) {
        switch self {
        case .files:
            let root = temporaryPath("shared-files")
            return (FileImageStorage(root: root), ["FLEET_STORAGE_ROOT": root], [root])
        case .gateway:
            let gateway = try await S3Gateway.connection()
            let prefix = "shared/\(UUID().uuidString)"
            return (S3ImageStorage(client: gateway.client(), prefix: prefix), gateway.environment(prefix: prefix), [gateway.endpoint.bucket, prefix])
        }
    }
}

/// `dispatcher storage usage`, the built binary run with a store's variables as an operator
/// would, against each store filled with known objects: objects and bytes per kind and owners,
/// exact, in its JSON and its table.
@Suite struct StorageUsageTests {
    /// What the store holds: two users and an onboarding token's tree, each kind, and a file that
    /// is no image (`other`: counted, its bytes not listed).
    static let contents: [(path: String, size: Int)] = [
        ("u1/uploads/up1", 1_000), ("u1/uploads/up2", 1_500), ("u1/body/b1.jpg", 2_000), ("u1/garments/g1.jpg", 3_000),
        ("u1/garments/g1_cutout.png", 4_000), ("u1/garments/g1_preview.jpg", 500), ("u1/renders/r1.jpg", 6_000),
        ("u1/renders/r2.jpg", 6_100), ("u2/body/b2.jpg", 2_200), ("u2/renders/r3.jpg", 7_000),
        ("tok_abc/uploads/up3", 900), ("tok_abc/body/b3.jpg", 1_800), ("u1/notes.txt", 5),
    ]

    @Test(arguments: StoreUnderTest.allCases)
    func usageCountsObjectsAndBytesPerKindAndOwnersExactly(_ store: StoreUnderTest) async throws {
        let (storage, environment, _) = try await store.makeShared()
        try await Self.fill(storage, store)

        let run = try await Self.usage(environment, ["--json", "--progress-seconds", "0.000001"])
        #expect(run.status == 0, "\(run.stderr)")
        let report = try JSONDecoder().decode(Report.self, from: Data(run.stdout.utf8))
        let kinds = Dictionary(uniqueKeysWithValues: report.kinds.map { ($0.kind, [$0.objects, $0.bytes]) })
        #expect(kinds == [
            "upload": [3, 3_400], "body": [3, 6_000], "garment": [1, 3_000], "cutout": [1, 4_000], "preview": [1, 500],
            "render": [3, 19_100], "other": [1, nil],
        ], "\(run.stdout)")
        #expect(report.kinds.map(\.kind) == StorageKind.allCases.map(\.rawValue), "every kind, in one order")
        #expect(report.total == Report.Amount(objects: 12, bytes: 36_000), "the images, other left out")
        #expect(report.owners == 3)
        #expect(run.stderr.contains("listed 12 objects, 35.2 KiB so far"), "a progress line on stderr: \(run.stderr)")

        let table = try await Self.usage(environment, ["--progress-seconds", "0"])
        #expect(table.status == 0, "\(table.stderr)")
        let lines = table.stdout.split(separator: "\n").map { $0.split(separator: " ").joined(separator: " ") }
        #expect(lines.contains("render 3 19100 18.7 KiB"), "\(table.stdout)")
        #expect(lines.contains("other 1 - -"), "\(table.stdout)")
        #expect(lines.contains("total 12 36000 35.2 KiB"), "\(table.stdout)")
        #expect(lines.last?.hasPrefix("3 owners") == true, "\(table.stdout)")
        #expect(table.stderr.isEmpty, "no progress asked: \(table.stderr)")
    }

    /// A missing folder, and a bucket with a wrong secret: non-zero, saying why, the secret unsaid.
    @Test func aStoreThatCannotBeListedEndsNonZeroNamingWhy() async throws {
        let missing = temporaryPath("no-such-root")
        let files = try await Self.usage(["FLEET_STORAGE_ROOT": missing], ["--json"])
        #expect(files.status != 0)
        #expect(files.stderr.contains("FLEET_STORAGE_ROOT") && files.stderr.contains(missing), "\(files.stderr)")
        #expect(files.stdout.isEmpty)

        var environment = try await StoreUnderTest.gateway.makeShared().environment
        let wrongSecret = "wrong-\(UUID().uuidString)"
        environment["AWS_SECRET_ACCESS_KEY"] = wrongSecret
        let bucket = try await Self.usage(environment, ["--json"])
        #expect(bucket.status != 0)
        #expect(bucket.stderr.contains("SignatureDoesNotMatch"), "\(bucket.stderr)")
        #expect(!bucket.stderr.contains(wrongSecret) && bucket.stdout.isEmpty)
    }

    /// A purge of more than one list page (1,234 renders and a body photo) in a real image
    /// worker: its `/metrics` counts every object deleted, per kind, with the sizes its listing
    /// found (DeleteObjects answers none), and `storage usage` then finds only the kept user.
    @Test(arguments: StoreUnderTest.allCases)
    func aPurgeCountsEveryObjectItDeletedWithItsSize(_ store: StoreUnderTest) async throws {
        let (storage, environment, _) = try await store.makeShared()
        let (purged, kept) = (try StorageID("purged"), try StorageID("kept"))
        try await ImageStorageContractTests.writeRenders(1_234, of: purged, to: storage)
        try await storage.write(Data(repeating: 1, count: 4_321), to: .bodyPhoto(user: purged, photo: try StorageID("b1")))
        try await storage.write(Data(repeating: 2, count: 10), to: .bodyPhoto(user: kept, photo: try StorageID("b1")))
        // writeRenders' objects are "r0"…"r1233": their bytes.
        let renderBytes = (0..<1_234).reduce(0) { $0 + "r\($1)".utf8.count }

        let q = try await TestQueue.make()
        let port = try freePort()
        let worker = try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: environment.merging([
            "FLEET_CUTOUT_BACKENDS": "local", "FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)",
        ]) { $1 })
        defer { worker.signal(SIGKILL) }
        let id = try await q.queue.enqueue([try NewJob(PurgeAccountPayload(userID: purged))])[0].id
        try await q.waitUntil(timeout: .seconds(180), "the purge ended") {
            let state = try await q.queue.job(id: id)?.state
            return state == .completed || state == .dead
        }
        #expect(try await q.queue.job(id: id)?.state == .completed, "\(worker.log)")

        let deleted = try await S3PipelineTests.counters("deleted", at: port)
        #expect(deleted == [
            .render: StorageTally.Amount(objects: 1_234, bytes: renderBytes), .body: StorageTally.Amount(objects: 1, bytes: 4_321),
        ])
        #expect(try await storage.tally().byKind == [.body: StorageTally.Amount(objects: 1, bytes: 10)])
    }

    @Test func eachKeyHasItsOwnKind() throws {
        let (user, id) = (try StorageID("u1"), try StorageID("g1"))
        let keys: [StorageKey] = [
            .upload(user: user, upload: id), .bodyPhoto(user: user, photo: id), .garment(user: user, garment: id),
            .garmentCutout(user: user, garment: id), .garmentPreview(user: user, garment: id), .render(user: user, render: id),
        ]
        #expect(keys.map(\.kind) == StorageKind.allCases.filter { $0 != .other })
    }

    /// The JSON of `dispatcher storage usage --json`, as a script reads it.
    struct Report: Decodable {
        struct Line: Decodable {
            let kind: String
            let objects: Int
            let bytes: Int?
        }
        struct Amount: Decodable, Equatable {
            let objects: Int
            let bytes: Int
        }
        let location: String
        let kinds: [Line]
        let total: Amount
        let owners: Int
    }

    /// Writes `contents` into `storage`: the images through the seam, the stray file beside it.
    static func fill(_ storage: any ImageStorage, _ store: StoreUnderTest) async throws {
        for (path, size) in contents {
            let bytes = Data(repeating: 0x5A, count: size)
            if let key = StorageKey(relativePath: path) {
                try await storage.write(bytes, to: key)
            } else if let files = storage as? FileImageStorage {
                try AtomicFile.write(bytes, to: "\(files.root)/\(path)")
            } else if let bucket = storage as? S3ImageStorage {
                try await bucket.client.put(key: bucket.prefix + path, body: bytes)
            }
        }
    }

    /// Runs `dispatcher storage usage` with only `environment`'s storage variables (and PATH):
    /// its exit status, stdout and stderr apart.
    static func usage(_ environment: [String: String], _ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        let (out, err) = (temporaryPath("usage-out"), temporaryPath("usage-err"))
        defer { for path in [out, err] { try? FileManager.default.removeItem(atPath: path) } }
        let command = ([builtExecutable("dispatcher"), "storage", "usage"] + arguments).map { "'\($0)'" }.joined(separator: " ")
        var env = environment
        env["PATH"] = ProcessInfo.processInfo.environment["PATH"]
        let status = try await ChildProcess.run("/bin/sh", ["-c", "exec \(command) >'\(out)' 2>'\(err)'"], environment: env)
        func text(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        return (status, text(out), text(err))
    }
}
