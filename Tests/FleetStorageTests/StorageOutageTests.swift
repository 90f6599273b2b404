import FleetHTTPClient
import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Renders
import Testing

/// The file store on a small tmpfs of its own (mounted by the test, which runs as root in a
/// private mount namespace, and unmounted after it): filled, or remounted read-only, under a
/// real image worker or render worker process. A storage outage defers the jobs that write,
/// their attempts unspent, each error coded; nothing partial is left in the tree; the worker
/// keeps running other work; when the store takes writes again every job completes.
@Suite(.serialized) struct StorageOutageTests {
    static let jobs = 20

    @Test func photosNormalisedOnAFullDiskWaitWithTheirAttemptsUnspentAndAllCompleteOnceSpaceReturns() async throws {
        let q = try await TestQueue.make()
        try await SmallDisk.with { disk in
            try disk.storeUpload()
            try disk.fill(leaving: 64 * 1024)
            try await Self.normalise(Self.jobs, on: disk, in: q, refusedWith: .full, saying: "No space left on device") {
                // Work that needs no space still runs meanwhile.
                let purge = try await q.queue.enqueue(try NewJob(PurgeAccountPayload(userID: StorageID("u2")))).id
                try await q.waitUntil("a purge completed during the outage") { try await q.queue.job(id: purge)?.state == .completed }
                try disk.removeFiller()
            }
        }
    }

    @Test func photosNormalisedOnAReadOnlyStoreWaitAndCompleteOnceItIsWritable() async throws {
        let q = try await TestQueue.make()
        try await SmallDisk.with { disk in
            try disk.storeUpload()
            try await disk.remount(readOnly: true)
            try await Self.normalise(5, on: disk, in: q, refusedWith: .unavailable, saying: "Read-only file system") {
                try await disk.remount(readOnly: false)
            }
        }
    }

    /// Normalises `count` photos with an image worker on `disk`, whose store refuses writes:
    /// waits until each photo was refused (`code`, its message `saying` the system's reason),
    /// checks they are deferred, not failed (no attempt spent, none dead, nothing partial in the
    /// tree) and that the worker says so (`/readyz` not ready naming the code, `fleet_storage_outage`
    /// 1); then `endOutage`, and waits until every photo is stored, each at its first attempt, and
    /// the worker ready again.
    static func normalise(
        _ count: Int, on disk: SmallDisk, in q: TestQueue, refusedWith code: StorageFailureCode, saying reason: String,
        endOutage: () async throws -> Void
    ) async throws {
        let port = try freePort()
        let worker = try WorkerProcess(
            databaseURL: q.url, executable: "image-worker", environment: ["FLEET_STORAGE_ROOT": disk.path, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)"])
        defer { worker.signal(SIGKILL) }
        let http = CurlHTTPClient()
        func get(_ path: String) async throws -> HTTPClientResponse {
            try await http.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)", timeout: .seconds(30)))
        }
        func outageGauge() async throws -> Double? { metricValue(try await get("/metrics").text, "fleet_storage_outage") }
        let ids = try await q.queue.enqueue(try (0..<count).map { index in
            try NewJob(NormalizeImagePayload(userID: StorageID("u1"), uploadID: StorageID("up1"), target: .body, imageID: StorageID("b\(index)")))
        }).map(\.id)
        try await q.waitUntil(timeout: .seconds(120), "every photo refused (\(code.rawValue)) at least once") {
            try await Self.count(ids, withError: code, in: q) == count
        }
        for id in ids {
            let job = try #require(try await q.queue.job(id: id))
            #expect(job.state != .dead && job.attempt <= 1, "\(job)\n\(worker.log)")
            #expect(job.errors.allSatisfy { $0.code == code.rawValue && $0.error.contains(reason) }, "\(job.errors)")
        }
        #expect(disk.leftovers().isEmpty, "\(disk.leftovers())")
        let unready = try await get("/readyz")
        #expect(unready.status == 503 && unready.text.contains("storage failing") && unready.text.contains(code.rawValue), "\(unready.text)")
        #expect(try await outageGauge() == 1)

        try await endOutage()
        try await q.waitUntil(timeout: .seconds(120), "every photo normalised once the store took writes") {
            try await Self.states(of: ids, in: q).allSatisfy { $0 == .completed }
        }
        for (index, id) in ids.enumerated() {
            #expect(try await q.queue.job(id: id)?.attempt == 1)
            #expect(FileManager.default.fileExists(atPath: "\(disk.path)/u1/body/b\(index).jpg"))
        }
        #expect(disk.leftovers().isEmpty, "\(disk.leftovers())")
        // The writes that succeeded ended the outage.
        let ready = try await get("/readyz")
        #expect(ready.status == 200, "\(ready.text)")
        #expect(try await outageGauge() == 0)
    }

    /// A render's result refused for a full disk: the render waits (its job deferred, within its
    /// deadline) and completes once space returns, its credit consumed once.
    @Test func aRenderWhoseResultCannotBeWrittenCompletesOnceSpaceReturnsChargedOnce() async throws {
        let f = try await RenderFixture.make()
        try await f.grant("u1", credits: 1)
        let renders = "\(f.root)/u1/renders"
        try await SmallDisk.with(at: renders) { disk in
            try disk.fill(leaving: 64 * 1024)
            let worker = try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: ["FLEET_STORAGE_ROOT": f.root])
            defer { worker.signal(SIGKILL) }
            let render = try await f.request("r1")
            let jobID = try #require(render.jobID)
            try await f.q.waitUntil("the render's result refused for a full disk") {
                try await Self.count([jobID], withError: .full, in: f.q) == 1
            }
            #expect(try await f.reload(render).status == .processing)
            try disk.removeFiller()
            try await f.q.waitUntil("the render complete") { try await f.reload(render).status.isTerminal }
            let ended = try await f.reload(render)
            #expect(ended.status == .complete && ended.resultPath == "u1/renders/r1.jpg", "\(ended)\n\(worker.log)")
            #expect(FileManager.default.fileExists(atPath: "\(renders)/r1.jpg"))
            #expect(try await f.ledger("r1") == ["reserve", "consume"])
            #expect(try await f.credits("u1").consumed == 1)
            try await f.q.waitUntil("the render's job ended") { try await f.q.queue.job(id: jobID)?.state.isTerminal == true }
            let job = try #require(try await f.q.queue.job(id: jobID))
            #expect(job.state == .completed && job.attempt == 1, "\(job)")
            #expect(disk.leftovers().isEmpty, "\(disk.leftovers())")
        }
    }

    static func count(_ ids: [Int64], withError code: StorageFailureCode, in q: TestQueue) async throws -> Int {
        try await q.pool.query(
            "SELECT count(*) AS n FROM jobs WHERE id = ANY ($1::bigint[]) AND errors @> jsonb_build_array(jsonb_build_object('code', $2::text))",
            [PostgresArray(ids), code.rawValue]).rows[0].int("n")
    }

    static func states(of ids: [Int64], in q: TestQueue) async throws -> [JobState] {
        var states: [JobState] = []
        for id in ids { states.append(try #require(try await q.queue.job(id: id)).state) }
        return states
    }
}

/// A 16 MiB tmpfs mounted at a folder for one test.
struct SmallDisk {
    let path: String
    var filler: String { "\(path)/filler" }

    /// Mounts one at `path` (a new temporary folder when nil), runs `body`, and unmounts it
    /// whatever `body` did.
    static func with(at path: String? = nil, _ body: (SmallDisk) async throws -> Void) async throws {
        let disk = SmallDisk(path: path ?? temporaryPath("small-disk"))
        try FileManager.default.createDirectory(atPath: disk.path, withIntermediateDirectories: true)
        try await run("/bin/mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", disk.path)
        do {
            try await body(disk)
        } catch {
            _ = try? await run("/bin/umount", "-l", disk.path)
            throw error
        }
        try await run("/bin/umount", "-l", disk.path)
    }

    /// `u1`'s upload `up1`, a photo from the corpus.
    func storeUpload() throws {
        try AtomicFile.write(try Data(contentsOf: corpus.appendingPathComponent("honeywave-1080x1920.jpg")), to: "\(path)/u1/uploads/up1")
    }

    /// Writes a file that leaves `bytes` free.
    func fill(leaving bytes: Int) throws {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { throw TestFailure("statvfs \(path): \(String(cString: strerror(errno)))") }
        let free = Int(stats.f_bavail) * Int(stats.f_frsize)
        try Data(count: max(0, free - bytes)).write(to: URL(fileURLWithPath: filler))
    }

    func removeFiller() throws { try FileManager.default.removeItem(atPath: filler) }

    func remount(readOnly: Bool) async throws {
        try await Self.run("/bin/mount", "-o", readOnly ? "remount,ro" : "remount,rw", path)
    }

    /// Temporary files of `AtomicFile` left in the tree.
    func leftovers() -> [String] {
        (FileManager.default.enumerator(atPath: path)?.allObjects as? [String] ?? []).filter { $0.contains(".tmp-") }
    }

    private static func run(_ command: String, _ arguments: String...) async throws {
        let status = try await ChildProcess.run(command, arguments)
        guard status == 0 else { throw TestFailure("\(command) \(arguments.joined(separator: " ")) exited \(status)") }
    }
}
