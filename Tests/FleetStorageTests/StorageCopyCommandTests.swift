import FleetObjectStore
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// `dispatcher storage copy`, the executable itself, between a file tree and a bucket on the real
/// gateway: what it copies, skips, keeps, and refuses, counted in its `--json` summary and in the
/// stores.
@Suite struct StorageCopyCommandTests {
    @Test func filesCopiedIntoTheBucketAndBackAreByteEqualAndASecondRunCopiesNothing() async throws {
        let gateway = try await S3Gateway.connection()
        let old = FileImageStorage(root: temporaryPath("copy-files"))
        let written = try await StoreFixture.fill(old, users: 3, objectsEach: 50)
        // What the walk leaves alone: a file that is no fleet key (counted foreign), and a
        // write in progress (AtomicFile's temporary file, not counted).
        FileManager.default.createFile(atPath: "\(old.root)/notes.txt", contents: Data("hi".utf8))
        FileManager.default.createFile(atPath: "\(old.root)/u0/renders/r0.jpg.tmp-1-2", contents: Data("partial".utf8))
        let prefix = "copy/\(UUID().uuidString)"
        let location = "s3://\(gateway.endpoint.bucket)/\(prefix)"
        let bucket = S3ImageStorage(client: gateway.client(), prefix: prefix)

        let first = try await CopyRun.run(["--from", old.root, "--to", location], gateway: gateway)
        #expect(first.status == 0, "\(first.output)")
        #expect(first.counts == ["listed": 150, "copied": 150, "skipped": 0, "kept": 0, "vanished": 0, "foreign": 1, "failed": 0])
        #expect(first.copiedBytes == written.values.map(\.count).reduce(0, +))
        let inBucket = try await ImageStorageContractTests.listAll(bucket)
        #expect(inBucket.count == 150)
        for object in inBucket { #expect(object.md5 == StoredObject.md5(of: try #require(written[object.key]))) }

        // The fleet wrote one object anew in the bucket since: the copy keeps it.
        let rewritten = StorageKey.render(user: try StorageID("u1"), render: try StorageID("r3"))
        let newer = Data("written by the fleet since".utf8)
        try await bucket.write(newer, to: rewritten)
        let second = try await CopyRun.run(["--from", old.root, "--to", location], gateway: gateway)
        #expect(second.status == 0, "\(second.output)")
        #expect(second.counts == ["listed": 150, "copied": 0, "skipped": 149, "kept": 1, "vanished": 0, "foreign": 1, "failed": 0])
        #expect(try await bucket.read(rewritten, maxBytes: 1000) == newer)

        let back = FileImageStorage(root: temporaryPath("copy-back"))
        let third = try await CopyRun.run(["--from", location, "--to", "file://\(back.root)"], gateway: gateway)
        #expect(third.status == 0, "\(third.output)")
        #expect(third.counts["copied"] == 150 && third.counts["failed"] == 0)
        for (key, data) in written where key != rewritten { #expect(try await back.read(key, maxBytes: 1 << 20) == data) }
        #expect(try await back.read(rewritten, maxBytes: 1000) == newer)
        let again = try await CopyRun.run(["--from", location, "--to", back.root], gateway: gateway)
        #expect(again.counts["copied"] == 0 && again.counts["skipped"] == 150, "\(again.output)")
    }

    @Test func aDryRunCountsWhatItWouldCopyAndWritesNothing() async throws {
        let gateway = try await S3Gateway.connection()
        let old = FileImageStorage(root: temporaryPath("dry-files"))
        let written = try await StoreFixture.fill(old, users: 2, objectsEach: 20)
        let prefix = "dry/\(UUID().uuidString)"
        let bucket = S3ImageStorage(client: gateway.client(), prefix: prefix)
        let copied = StorageKey.render(user: try StorageID("u0"), render: try StorageID("r0"))
        try await bucket.write(try #require(written[copied]), to: copied)

        let run = try await CopyRun.run(["--from", old.root, "--to", "s3://\(gateway.endpoint.bucket)/\(prefix)", "--dry-run"], gateway: gateway)
        #expect(run.status == 0, "\(run.output)")
        #expect(run.counts == ["listed": 40, "copied": 39, "skipped": 1, "kept": 0, "vanished": 0, "foreign": 0, "failed": 0])
        #expect(try await StoreListing.paths(of: bucket) == [copied.relativePath], "nothing written")
    }

    /// Stopped by SIGKILL half way: the next run copies the rest and skips what the first one
    /// finished, the one after copies nothing; the progress line came while it ran.
    @Test func aCopyKilledHalfWayIsFinishedByTheNextRun() async throws {
        let gateway = try await S3Gateway.connection()
        let old = FileImageStorage(root: temporaryPath("resume-files"))
        let total = 600
        _ = try await StoreFixture.fill(old, users: 6, objectsEach: 100)
        let prefix = "resume/\(UUID().uuidString)"
        let bucket = S3ImageStorage(client: gateway.client(), prefix: prefix)
        let location = "s3://\(gateway.endpoint.bucket)/\(prefix)"

        let log = temporaryPath("copy") + ".log"
        let killed = try ChildProcess(
            builtExecutable("dispatcher"), ["storage", "copy", "--from", old.root, "--to", location, "--concurrency", "1", "--progress-seconds", "0.05"],
            environment: CopyRun.environment(gateway), outputPath: log)
        var copiedBeforeKill = 0
        try await waitFor("a part of the copy in the bucket", timeout: .seconds(120)) {
            copiedBeforeKill = try await bucket.client.list(prefix: prefix + "/").keys.count
            let progressed = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("objects/s")
            return copiedBeforeKill >= 60 && progressed
        }
        killed.signal(SIGKILL)
        #expect(await killed.wait(timeout: .seconds(30)) == 128 + SIGKILL)
        let stored = try await StoreListing.paths(of: bucket).count
        #expect(stored >= copiedBeforeKill && stored < total, "killed half way: \(stored) of \(total)")

        let resumed = try await CopyRun.run(["--from", old.root, "--to", location], gateway: gateway)
        #expect(resumed.status == 0, "\(resumed.output)")
        #expect(resumed.counts["failed"] == 0)
        #expect(resumed.counts["skipped"] == stored, "what the killed run finished is skipped")
        #expect(resumed.counts["copied"] == total - stored)
        let last = try await CopyRun.run(["--from", old.root, "--to", location], gateway: gateway)
        #expect(last.counts["copied"] == 0 && last.counts["skipped"] == total, "\(last.output)")
        #expect(try await StoreListing.paths(of: bucket).count == total)
    }

    @Test func anObjectThatCannotBeCopiedIsAFailureAndTheExitIsNotZero() async throws {
        let gateway = try await S3Gateway.connection()
        let old = FileImageStorage(root: temporaryPath("failing-files"))
        _ = try await StoreFixture.fill(old, users: 1, objectsEach: 5)
        let big = StorageKey.upload(user: try StorageID("u0"), upload: try StorageID("big"))
        try await old.write(ImageStorageContractTests.bytes(5000), to: big)
        let run = try await CopyRun.run(
            ["--from", old.root, "--to", "s3://\(gateway.endpoint.bucket)/failing/\(UUID().uuidString)", "--max-object-bytes", "4000"], gateway: gateway)
        #expect(run.status == 1)
        #expect(run.counts["copied"] == 5 && run.counts["failed"] == 1, "\(run.output)")
        #expect(run.failures == ["u0/uploads/big: 5000 bytes, more than --max-object-bytes 4000"])
    }
}

/// Stores filled with known objects.
enum StoreFixture {
    /// `objectsEach` objects of each of `users` users (`u0`, `u1`, …), of every kind, random bytes.
    static func fill(_ storage: any ImageStorage, users: Int, objectsEach: Int, userPrefix: String = "u") async throws -> [StorageKey: Data] {
        var written: [StorageKey: Data] = [:]
        for user in 0..<users {
            let id = try StorageID("\(userPrefix)\(user)")
            for index in 0..<objectsEach {
                let object = try StorageID("\(index / 6)")
                let key: StorageKey = switch index % 6 {
                case 0: .render(user: id, render: try StorageID("r\(index / 6)"))
                case 1: .upload(user: id, upload: object)
                case 2: .bodyPhoto(user: id, photo: object)
                case 3: .garment(user: id, garment: object)
                case 4: .garmentCutout(user: id, garment: object)
                default: .garmentPreview(user: id, garment: object)
                }
                written[key] = ImageStorageContractTests.bytes(Int.random(in: 1...4000))
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, (key, data)) in written.enumerated() {
                if index >= 16 { try await group.next() }
                group.addTask { try await storage.write(data, to: key) }
            }
            try await group.waitForAll()
        }
        return written
    }
}

/// One run of `dispatcher storage copy --json` to its end: its exit status, its summary's counts.
struct CopyRun {
    let status: Int32
    let summary: [String: Any]
    let output: String

    var counts: [String: Int] {
        let counts = summary["counts"] as? [String: Any] ?? [:]
        return ["listed", "copied", "skipped", "kept", "vanished", "foreign", "failed"].reduce(into: [:]) { $0[$1] = counts[$1] as? Int }
    }
    var copiedBytes: Int? { (summary["counts"] as? [String: Any])?["copiedBytes"] as? Int }
    var failures: [String] { (summary["counts"] as? [String: Any])?["failures"] as? [String] ?? [] }

    /// The gateway's keys and endpoint in the AWS CLI's variables, as an operator's shell holds them.
    static func environment(_ gateway: S3Gateway.Connection) -> [String: String] {
        ProcessInfo.processInfo.environment.merging(gateway.environment(prefix: "")) { $1 }.filter { $0.key != "FLEET_STORAGE" }
    }

    static func run(_ arguments: [String], gateway: S3Gateway.Connection) async throws -> CopyRun {
        let stdout = temporaryPath("copy-out") + ".json", stderr = temporaryPath("copy-err") + ".log"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: builtExecutable("dispatcher"))
        process.arguments = ["storage", "copy"] + arguments + ["--json", "--progress-seconds", "0"]
        process.environment = environment(gateway)
        FileManager.default.createFile(atPath: stdout, contents: nil)
        FileManager.default.createFile(atPath: stderr, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: stdout))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderr))
        try process.run()
        while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        let text = (try? String(contentsOfFile: stdout, encoding: .utf8)) ?? ""
        let errors = (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? ""
        return CopyRun(status: process.terminationStatus, json: text, stderr: errors)
    }

    /// `json`: what `--json` printed; `output` (for a failure's message) holds both.
    init(status: Int32, json: String, stderr: String = "") {
        self.status = status
        self.output = json + stderr
        summary = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:]
    }
}

/// The race a purge runs with the copy, made to happen every time: the source's object is
/// deleted in both stores (the old one first, as the fleet deletes) right after the copy read
/// it, so the copy's write lands after the purge. The copy's second look at its source removes
/// what it wrote.
@Suite struct StorageCopyPurgeRaceTests {
    @Test(arguments: StoreUnderTest.allCases)
    func anObjectPurgedBetweenTheCopysReadAndItsWriteIsNotResurrected(_ kind: StoreUnderTest) async throws {
        let destination = try await kind.make()
        let tree = FileImageStorage(root: temporaryPath("race-tree"))
        let written = try await StoreFixture.fill(tree, users: 1, objectsEach: 12)
        let victim = StorageKey.render(user: try StorageID("u0"), render: try StorageID("r1"))
        // Purged from both stores once the copy has read it.
        let source = ObservedImageStorage(base: tree, afterRead: { key in
            guard key == victim else { return }
            try await tree.delete(key)
            try await destination.delete(key)
        })

        let counts = try await StorageCopy(from: source, to: destination).run()
        #expect(counts.copied == 11 && counts.vanished == 1 && counts.failed == 0, "\(counts)")
        #expect(try await !tree.holds(victim))
        #expect(try await !destination.holds(victim), "the purged object is not resurrected in the destination")
        #expect(try await StoreListing.paths(of: destination).count == written.count - 1)
    }
}
