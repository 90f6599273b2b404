@testable import DispatcherProtocol
import FleetPostgres
@testable import FleetQueue
import FleetSchema
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Providers
import RenderLedger
@testable import Renders
import Testing

/// `account.purge` after `account.link`: the onboarding photos stay in the token's tree when the
/// token is linked, and the purge deletes that tree with the user's own, and the rows naming
/// them. Every piece real: the `dispatcher`, `image-worker` and `render-worker` processes over
/// one PostgreSQL database, the offline `local` provider and cut-out, files on disk.
@Suite(.serialized) struct AccountPurgeTests {
    struct Fleet {
        let q: TestQueue
        let root: String
        let socket: String
        let processes: [WorkerProcess]
        let client: DispatcherClient

        static func start() async throws -> Fleet {
            let q = try await TestQueue.make()
            let root = temporaryPath("images")
            try await RenderSettings(provider: LocalTryOnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: q.pool)
            let socket = temporaryPath("dispatcher") + ".sock"
            let dispatcher = try WorkerProcess(databaseURL: q.url, executable: "dispatcher", environment: [
                "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(try freePort())",
                "FLEET_STORAGE_ROOT": root,
            ])
            let renders = try WorkerProcess(databaseURL: q.url, executable: "render-worker", environment: ["FLEET_STORAGE_ROOT": root])
            let ping = try await ChildProcess.run(builtExecutable("dispatcher"), ["ping", "--dispatcher", socket, "--wait", "60"])
            #expect(ping == 0, "dispatcher log: \(dispatcher.log)")
            let client = try await DispatcherClient.connect(to: .unix(path: socket))
            return Fleet(q: q, root: root, socket: socket, processes: [dispatcher, renders, try imageWorker(q, root)], client: client)
        }

        static func imageWorker(_ q: TestQueue, _ root: String) throws -> WorkerProcess {
            try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: ["FLEET_STORAGE_ROOT": root, "FLEET_CUTOUT_BACKENDS": "local"])
        }

        /// A person's first launch as the app does it: a token, its two uploads stored in the
        /// token's tree by the backend, the onboarding render requested with them (normalise →
        /// cut-out → render), then the account created and the token linked to `user`.
        /// Answers the token's tree, which then holds the person's seven files.
        func onboardAndLink(_ user: String) async throws -> String {
            let issued = try await client.send(IssueTokenRequest())
            try AtomicFile.write(RenderFixture.bodyPhoto, to: "\(root)/\(issued.tokenId)/uploads/upB")
            try AtomicFile.write(plainBackgroundGarment, to: "\(root)/\(issued.tokenId)/uploads/upG")
            _ = try await client.send(RequestRenderRequest(
                renderId: "r-onboarding", ephemeralToken: issued.token, garmentId: "g1", bodyPhotoId: "b1", category: "tops",
                bodyUploadId: "upB", garmentUploadId: "upG"))
            let waited = try await client.send(WaitRenderRequest(renderId: "r-onboarding", timeoutMs: 45_000))
            #expect(waited.render.status == .complete, "\(logs)")
            #expect(waited.render.resultPath == "\(issued.tokenId)/renders/r-onboarding.jpg")
            let linked = try await client.send(LinkAccountRequest(ephemeralToken: issued.token, userId: user))
            #expect(linked.renderId == "r-onboarding")
            #expect(files(under: issued.tokenId) == [
                "body/b1.jpg", "garments/g1.jpg", "garments/g1_cutout.png", "garments/g1_preview.jpg", "renders/r-onboarding.jpg",
                "uploads/upB", "uploads/upG",
            ])
            return issued.tokenId
        }

        /// Files nobody purges: another account's, and a live onboarding token's.
        func bystanders() async throws -> Set<String> {
            let live = try await client.send(IssueTokenRequest())
            try AtomicFile.write(Data("upload".utf8), to: "\(root)/\(live.tokenId)/uploads/up1")
            try AtomicFile.write(Data("body".utf8), to: "\(root)/u2/body/b1.jpg")
            return ["\(live.tokenId)/uploads/up1", "u2/body/b1.jpg"]
        }

        /// The files under `tree` (the whole storage root when empty), relative to it.
        func files(under tree: String = "") -> Set<String> {
            let folder = tree.isEmpty ? root : "\(root)/\(tree)"
            let all = (FileManager.default.enumerator(atPath: folder)?.allObjects as? [String]) ?? []
            return Set(all.filter { path in
                var directory: ObjCBool = false
                return FileManager.default.fileExists(atPath: "\(folder)/\(path)", isDirectory: &directory) && !directory.boolValue
            })
        }

        /// Rows that still name the person's photos or trees.
        func rowsNaming(_ user: String, tree: String) async throws -> Int {
            try await q.pool.query("""
                SELECT (SELECT count(*) FROM renders WHERE user_id = $1 OR owner_id IN ($1, $2) OR result_path LIKE $2 || '/%')
                     + (SELECT count(*) FROM ephemeral_tokens WHERE linked_user_id = $1 OR id = $2) AS n
                """, [user, tree]).rows[0].int("n")
        }

        var logs: String { processes.map(\.log).joined(separator: "\n---\n") }

        func stop() {
            for process in processes { process.signal(SIGKILL) }
            try? FileManager.default.removeItem(atPath: root)
        }
    }

    @Test func aLinkedOnboardingRenderIsPurgedWithItsAccountAndNothingElse() async throws {
        let f = try await Fleet.start()
        defer { f.stop() }
        let tree = try await f.onboardAndLink("u1")
        try AtomicFile.write(Data("upload".utf8), to: "\(f.root)/u1/uploads/later")
        let kept = try await f.bystanders()

        let purge = try await f.client.send(PurgeAccountRequest(userId: "u1"))
        let ended = try await f.client.send(WaitRequest(jobId: purge.jobId, timeoutMs: 60_000)).job
        #expect(ended.state == .completed, "\(ended)\n\(f.logs)")
        #expect(ended.result == .object(["filesDeleted": .number(8)]))
        #expect(f.files() == kept)
        #expect(try await f.rowsNaming("u1", tree: tree) == 0)
        await f.client.close()
    }

    /// The image worker running the purge is killed after the user's renders were deleted and
    /// before any file was: the purge's next attempt (on another worker) still finds the linked
    /// token's tree, since the token's row goes only with the files.
    @Test func aPurgeKilledHalfWayIsFinishedByItsRetry() async throws {
        let f = try await Fleet.start()
        defer { f.stop() }
        let tree = try await f.onboardAndLink("u1")
        let kept = try await f.bystanders()
        let victim = f.processes[2]

        let purge = try await f.q.pool.withConnection { holder in
            // Holds the linked token's row, so the purge stops between its two transactions.
            try await holder.query("BEGIN")
            try await holder.query("SELECT id FROM ephemeral_tokens WHERE linked_user_id = 'u1' FOR UPDATE")
            let purge = try await f.client.send(PurgeAccountRequest(userId: "u1"))
            try await f.q.waitUntil("the purge waits for the token's row, its renders deleted") {
                let renders = try await f.q.pool.query("SELECT count(*) AS n FROM renders WHERE user_id = 'u1'").rows[0].int("n")
                let waiting = try await f.q.pool.query(
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()").rows[0].int("n")
                return renders == 0 && waiting == 1
            }
            #expect(f.files(under: tree).count == 7)
            victim.signal(SIGKILL)
            #expect(await victim.wait() != nil)
            try await holder.query("ROLLBACK")
            return purge
        }
        let survivor = try Fleet.imageWorker(f.q, f.root)
        defer { survivor.signal(SIGKILL) }

        let ended = try await f.client.send(WaitRequest(jobId: purge.jobId, timeoutMs: 60_000)).job
        #expect(ended.state == .completed && ended.attempt == 2, "\(ended)\n\(f.logs)\n---\n\(survivor.log)")
        #expect(ended.errors.map(\.code) == ["WORKER_LOST"] || ended.errors.map(\.code) == ["LEASE_EXPIRED"], "\(ended.errors)")
        #expect(ended.result == .object(["filesDeleted": .number(7)]))
        #expect(f.files() == kept)
        #expect(try await f.rowsNaming("u1", tree: tree) == 0)
        await f.client.close()
    }

    /// A photo still being made in the token's tree when the purge starts (its normalisation held
    /// by a pause): the purge waits for it, then deletes it too, rather than deleting the tree
    /// and letting the photo land in it after.
    @Test func aPurgeWaitsForThePhotoStillBeingMadeInTheTree() async throws {
        let f = try await Fleet.start()
        defer { f.stop() }
        let issued = try await f.client.send(IssueTokenRequest())
        try AtomicFile.write(RenderFixture.bodyPhoto, to: "\(f.root)/\(issued.tokenId)/uploads/upB")
        _ = try await f.client.pause(kind: "image.normalize")
        let normalize = try await f.client.send(NormalizeImageRequest(userId: issued.tokenId, uploadId: "upB", target: .body, imageId: "b1"))
        _ = try await f.client.send(LinkAccountRequest(ephemeralToken: issued.token, userId: "u1"))

        let purge = try await f.client.send(PurgeAccountRequest(userId: "u1", options: JobOptions(maxAttempts: 20)))
        try await f.q.waitUntil("the purge refused while the photo is being made") {
            try await f.q.queue.job(id: purge.jobId)?.errors.contains { $0.error.contains("still write into") } == true
        }
        #expect(f.files(under: issued.tokenId) == ["uploads/upB"])
        _ = try await f.client.send(QueueResumeRequest(kind: "image.normalize"))

        #expect(try await f.client.send(WaitRequest(jobId: normalize.jobId, timeoutMs: 60_000)).job.state == .completed)
        let ended = try await f.client.send(WaitRequest(jobId: purge.jobId, timeoutMs: 60_000)).job
        #expect(ended.state == .completed, "\(ended)\n\(f.logs)")
        #expect(ended.result == .object(["filesDeleted": .number(2)]))
        #expect(f.files().isEmpty)
        #expect(try await f.rowsNaming("u1", tree: issued.tokenId) == 0)
        await f.client.close()
    }
}

/// Migration 22 on an installation whose accounts were purged while their linked onboarding
/// trees stayed: each such account is purged again, no other.
@Suite struct PurgeLinkedTreesMigrationTests {
    @Test func accountsPurgedBeforeVersion22ArePurgedAgainAndTheirOnboardingTreesGo() async throws {
        let url = try await PostgresCluster.shared.makeEmptyDatabase()
        try await Migrator(migrations: FleetSchema.migrations.filter { $0.version < 22 }, logger: testLogger).migrate(conninfo: url)
        let pool = PostgresPool(conninfo: url, maxConnections: 2)
        let root = temporaryPath("images")
        defer { try? FileManager.default.removeItem(atPath: root) }
        // Each account linked a token an hour ago and has its onboarding render in the token's tree.
        for (user, token) in [("u-gone", "eph-gone"), ("u-back", "eph-back"), ("u-kept", "eph-kept")] {
            try await pool.query("""
                INSERT INTO ephemeral_tokens (id, token_hash, expires_at, linked_user_id, linked_at)
                VALUES ($2, decode(md5($2), 'hex'), now() - interval '1 hour', $1, now() - interval '1 hour');
                """, [user, token])
            try await pool.query("""
                INSERT INTO renders (id, user_id, owner_id, garment_id, body_photo_id, category, provider, status, result_path, deadline_at, created_at)
                VALUES ('r-' || $1, $1, $2, 'g1', 'b1', 'tops', 'local', 'complete', $2 || '/renders/r-' || $1 || '.jpg', now() - interval '1 hour', now() - interval '1 hour')
                """, [user, token])
            try AtomicFile.write(Data("render".utf8), to: "\(root)/\(token)/renders/r-\(user).jpg")
        }
        // u-gone and u-back were purged half an hour ago; u-back has rendered since (the backend
        // kept the account), u-kept was never purged.
        for user in ["u-gone", "u-back"] {
            try await pool.query("""
                INSERT INTO jobs (kind, payload, state, attempt, finished_at)
                VALUES ('account.purge', jsonb_build_object('userId', $1::text), 'completed', 1, now() - interval '30 minutes')
                """, [user])
        }
        try await pool.query("""
            INSERT INTO renders (id, user_id, owner_id, garment_id, body_photo_id, category, provider, status, deadline_at)
            VALUES ('r-since', 'u-back', 'u-back', 'g1', 'b1', 'tops', 'local', 'pending', now() + interval '30 seconds')
            """)

        let applied = try await Migrator(migrations: FleetSchema.migrations, logger: testLogger).migrate(conninfo: url)
        #expect(applied.first == 22, "migration 22 first, then the later ones: \(applied)")
        let enqueued = try await pool.query(
            "SELECT payload->>'userId' AS user_id, idempotency_key FROM jobs WHERE kind = 'account.purge' AND state = 'available'").rows
        #expect(try enqueued.map { [try $0.string("user_id"), try $0.string("idempotency_key")] } == [["u-gone", "purge:linked-trees:u-gone"]])

        // The image worker's purge runs it: the onboarding tree goes, with the rows naming it.
        let driver = PostgresQueueDriver(executor: pool)
        let claimed = try await driver.jobClaim(ClaimRequest(owner: "test-image-worker", lease: .seconds(30), slots: [.accountPurge: 10])).jobs
        let purge = PurgeHandler(storage: FileImageStorage(root: root), accounts: AccountErasure(pool: pool))
        let context = JobContext(logger: testLogger, workerID: "test-image-worker", queue: JobQueue(driver: driver, knownKinds: nil))
        for job in claimed { _ = try await purge.run(job, context: context) }
        #expect(!FileManager.default.fileExists(atPath: "\(root)/eph-gone"))
        #expect(FileManager.default.fileExists(atPath: "\(root)/eph-back/renders/r-u-back.jpg"))
        #expect(FileManager.default.fileExists(atPath: "\(root)/eph-kept/renders/r-u-kept.jpg"))
        let tokens = try await pool.query("SELECT id FROM ephemeral_tokens ORDER BY id").rows.map { try $0.string("id") }
        #expect(tokens == ["eph-back", "eph-kept"])
        let renders = try await pool.query("SELECT id FROM renders ORDER BY id").rows.map { try $0.string("id") }
        #expect(renders == ["r-since", "r-u-back", "r-u-kept"])
    }
}
