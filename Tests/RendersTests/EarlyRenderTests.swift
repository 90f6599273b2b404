@testable import DispatcherProtocol
import FakeProviders
import FleetHTTPClient
import FleetPostgres
@testable import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Providers
@testable import Renders
import Testing

/// A render requested as soon as its uploads exist (`render.request` with `bodyUploadId` and
/// `garmentUploadId`): the dispatcher enqueues the photos' normalisation and the garment's
/// cut-out in the render's transaction, and the render runs after them. Every piece real: the
/// `dispatcher`, `image-worker` and `render-worker` processes over one PostgreSQL database, a
/// fake rembg (the cut-out backend) and a fake fal on loopback.
@Suite(.serialized) struct EarlyRenderTests {
    struct Fleet {
        let q: TestQueue
        let root: String
        let fal: FakeFal
        let rembg: FakeRembg
        let processes: [WorkerProcess]
        let client: DispatcherClient
        /// The dispatcher's socket, for more connections.
        let socket: String

        /// Uploads `upB` (a body photo) and `upG` (a garment on a plain background) of `u1`, who
        /// has 2 credits; fal FASHN active; the cut-out backend answers as `cutout` says.
        static func start(cutout: [FakeBehaviour], bodyUpload: Data = RenderFixture.bodyPhoto) async throws -> Fleet {
            let q = try await TestQueue.make()
            let root = temporaryPath("images")
            try AtomicFile.write(bodyUpload, to: "\(root)/u1/uploads/upB")
            try AtomicFile.write(plainBackgroundGarment, to: "\(root)/u1/uploads/upG")
            try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: q.pool)
            try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('u1', 2)")
            let fal = try await FakeFal.start(webhookClient: CurlHTTPClient())
            fal.update { $0.latency = .milliseconds(200) }
            let rembg = try await FakeRembg.start(script: FakeScript(cutout))
            let socket = temporaryPath("dispatcher") + ".sock"
            let dispatcher = try WorkerProcess(databaseURL: q.url, executable: "dispatcher", environment: [
                "FLEET_DISPATCHER_TCP": "off", "FLEET_DISPATCHER_SOCKET": socket, "FLEET_HTTP_ADDRESS": "127.0.0.1:\(try freePort())",
                "FLEET_STORAGE_ROOT": root,
            ])
            // One backend, given more time than the slowest answer a test scripts: what ends the
            // wait is the render's deadline, not the backend's budget.
            let images = try WorkerProcess(databaseURL: q.url, executable: "image-worker", environment: [
                "FLEET_STORAGE_ROOT": root, "FLEET_CUTOUT_BACKENDS": "rembg", "FLEET_REMBG_URL": rembg.baseURL,
                "FLEET_CUTOUT_TIMEOUT_MS": "60000",
            ])
            let renders = try WorkerProcess(databaseURL: q.url, executable: "render-worker", environment: [
                "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL, "FLEET_RENDER_POLL_MS": "200", "FLEET_STORAGE_ROOT": root,
            ])
            let ping = try await ChildProcess.run(builtExecutable("dispatcher"), ["ping", "--dispatcher", socket, "--wait", "60"])
            #expect(ping == 0, "dispatcher log: \(dispatcher.log)")
            let client = try await DispatcherClient.connect(to: .unix(path: socket))
            return Fleet(q: q, root: root, fal: fal, rembg: rembg, processes: [dispatcher, images, renders], client: client, socket: socket)
        }

        /// `r1`, asked the moment the uploads exist.
        func requestRender() async throws -> RenderView {
            try await client.send(RequestRenderRequest(
                renderId: "r1", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops",
                bodyUploadId: "upB", garmentUploadId: "upG"))
        }

        /// The issue's opening scenario, as a backend driving the steps itself sends it: the body
        /// photo's normalisation and `garment.process`, then at once `r1` naming the photos by id
        /// (no upload ids) and the jobs of `after`.
        func processThenRequestRender(after: [Int64]? = nil) async throws -> (body: EnqueuedJobResult, garment: ProcessGarmentRequest.Result, render: RenderView) {
            let body = try await client.send(NormalizeImageRequest(userId: "u1", uploadId: "upB", target: .body, imageId: "b1"))
            let garment = try await client.send(ProcessGarmentRequest(userId: "u1", uploadId: "upG", garmentId: "g1"))
            let render = try await client.send(RequestRenderRequest(
                renderId: "r1", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops", after: after))
            return (body, garment, render)
        }

        func waitForRender() async throws -> RenderView {
            let waited = try await client.send(WaitRenderRequest(renderId: "r1", timeoutMs: 45_000))
            #expect(!waited.timedOut, "\(logs)")
            return waited.render
        }

        /// fal was sent one request, with the cut-out stored for `g1`, byte for byte.
        func expectOneSubmitOfTheStoredCutout() throws {
            #expect(submits.count == 1)
            let sent = try EarlyRenderTests.garmentImage(of: try #require(submits.first))
            let stored = try Data(contentsOf: URL(fileURLWithPath: "\(root)/u1/garments/g1_cutout.png"))
            #expect(sent.mimeType == "image/png" && sent.bytes == stored)
        }

        /// The render's job once ended (its outcome is recorded just after the render's).
        func endedJob(of render: RenderView) async throws -> JobRecord {
            let runID = try #require(render.jobId)
            try await q.waitUntil("the render's job ended") { try await job(runID).state.isTerminal }
            return try await job(runID)
        }

        /// The render's job once ended, which completed at its first attempt without an error.
        func expectRunOnceAtFirstAttempt(_ render: RenderView) async throws -> JobRecord {
            let run = try await endedJob(of: render)
            #expect(run.state == .completed && run.attempt == 1 && run.errors.isEmpty, "\(run)")
            return run
        }

        var logs: String { processes.map(\.log).joined(separator: "\n---\n") }
        var submits: [RecordedRequest] { fal.requests.filter { $0.method == "POST" } }

        func job(_ id: Int64) async throws -> JobRecord { try #require(try await q.queue.job(id: id)) }

        /// The render's job once ended, and the jobs it ran after, by kind (`garment` for the
        /// garment's normalisation).
        func inputJobs(of render: RenderView) async throws -> (run: JobRecord, body: JobRecord, garment: JobRecord, cutout: JobRecord) {
            let run = try await endedJob(of: render)
            #expect(run.dependsOn.count == 3)
            var inputs: [JobRecord] = []
            for id in run.dependsOn { inputs.append(try await job(id)) }
            func target(_ job: JobRecord) -> ImageTarget? {
                guard job.kind == .imageNormalize else { return nil }
                return try? JSONDecoder().decode(NormalizeImagePayload.self, from: Data(job.payload.utf8)).target
            }
            let body = try #require(inputs.first { target($0) == .body })
            let garment = try #require(inputs.first { target($0) == .garment })
            let cutout = try #require(inputs.first { $0.kind == .garmentCutout })
            return (run, body, garment, cutout)
        }

        func credits() async throws -> (consumed: Int, ledger: [String]) {
            let consumed = try await q.pool.query("SELECT total_consumed FROM credits WHERE user_id = 'u1'").rows[0].int("total_consumed")
            let ledger = try await q.pool.query("SELECT entry FROM credit_ledger WHERE render_id = 'r1' ORDER BY id").rows.map { try $0.string("entry") }
            return (consumed, ledger)
        }

        func stop() async {
            await client.close()
            for process in processes { process.signal(SIGKILL) }
            for process in processes { _ = await process.wait() }
            await fal.stop()
            await rembg.stop()
            try? FileManager.default.removeItem(atPath: root)
        }
    }

    /// The garment image fal was sent, decoded from its data URI.
    static func garmentImage(of submit: RecordedRequest) throws -> (mimeType: String, bytes: Data) {
        let uri = try #require(submit.json?["garment_image"] as? String)
        let comma = try #require(uri.firstIndex(of: ","))
        let mimeType = String(uri.dropFirst("data:".count).prefix { $0 != ";" })
        return (mimeType, try #require(Data(base64Encoded: String(uri[uri.index(after: comma)...]))))
    }

    @Test func theEarlyRenderWaitsForTheCutoutAndUsesIt() async throws {
        let fleet = try await Fleet.start(cutout: [.succeedAfter(.seconds(3))])
        let requested = try await fleet.requestRender()
        #expect(requested.status == .pending && requested.charged && requested.garmentCutout == nil)
        let render = try await fleet.waitForRender()
        #expect(render.status == .complete && render.garmentCutout == true, "\(fleet.logs)")

        // fal was sent the cut-out the slow backend made, once; the render ran once, after every
        // input was made: no attempt spent on a missing photo.
        try fleet.expectOneSubmitOfTheStoredCutout()
        _ = try await fleet.expectRunOnceAtFirstAttempt(render)
        // (Its `started_at` is not compared with the inputs' `finished_at`: with limits set, a
        // claim's is the start of its transaction, which may have begun, waiting for the limits'
        // lock, before the commit that released the job. The one attempt and the bytes at fal say
        // it ran after its inputs.)
        let jobs = try await fleet.inputJobs(of: render)
        for input in [jobs.body, jobs.garment, jobs.cutout] {
            #expect(input.state == .completed && input.attempt == 1)
        }
        #expect(fleet.rembg.requests.count == 1)

        let credits = try await fleet.credits()
        #expect(credits.consumed == 1 && credits.ledger == ["reserve", "consume"])
        await fleet.stop()
    }

    @Test func aCutoutSlowerThanTheDeadlineTimesTheRenderOutBeforeAnythingIsSubmitted() async throws {
        let fleet = try await Fleet.start(cutout: [.succeedAfter(.seconds(35))])
        let requested = try await fleet.requestRender()
        #expect(requested.status == .pending)
        let render = try await fleet.waitForRender()
        #expect(render.status == .failed && render.errorCode == "RENDER_TIMEOUT", "\(fleet.logs)")
        #expect(render.failureCode == "TIMEOUT" && render.errorMessage != nil)
        let credits = try await fleet.credits()
        #expect(credits.consumed == 0 && credits.ledger == ["reserve", "release"])

        // The sweep cancelled the render's job while it waited; once the cut-out is made at
        // last, nothing runs the render and fal has still been sent nothing.
        let jobs = try await fleet.inputJobs(of: render)
        #expect(jobs.run.state == .cancelled && jobs.run.attempt == 0, "\(jobs.run)")
        try await fleet.q.waitUntil(timeout: .seconds(30), "the slow cut-out ended") { try await fleet.job(jobs.cutout.id).state.isTerminal }
        #expect(try await fleet.job(jobs.cutout.id).state == .completed)
        // The cut-out's ending statement released or failed its dependents (the triggers of
        // docs/queue.md, "Dependencies"): nothing can revive the render's job after it.
        #expect(try await fleet.job(jobs.run.id).state == .cancelled)
        #expect(fleet.fal.requests.isEmpty)
        #expect(try await fleet.credits().ledger == ["reserve", "release"])
        await fleet.stop()
    }

    @Test func aCutoutWhoseBackendsAllFailLeavesTheRenderToTheNormalisedPhotoAndSaysSo() async throws {
        let fleet = try await Fleet.start(cutout: [.fail(status: 502)])
        _ = try await fleet.requestRender()
        let render = try await fleet.waitForRender()
        #expect(render.status == .complete && render.garmentCutout == false, "\(fleet.logs)")

        let jobs = try await fleet.inputJobs(of: render)
        #expect(jobs.cutout.state == .completed && jobs.cutout.attempt == 1)
        #expect(CutoutResult.madeCutout(jobs.cutout.result) == false, "\(jobs.cutout.result ?? "no result")")
        #expect(jobs.run.state == .completed && jobs.run.attempt == 1)
        #expect(!FileManager.default.fileExists(atPath: "\(fleet.root)/u1/garments/g1_cutout.png"))

        #expect(fleet.submits.count == 1)
        let sent = try Self.garmentImage(of: try #require(fleet.submits.first))
        let photo = try Data(contentsOf: URL(fileURLWithPath: "\(fleet.root)/u1/garments/g1.jpg"))
        #expect(sent.mimeType == "image/jpeg" && sent.bytes == photo)
        #expect(try await fleet.credits().consumed == 1)
        await fleet.stop()
    }

    @Test func anUploadThatIsNotAnImageFailsTheRenderAtOnceWithItsCreditReleased() async throws {
        let fleet = try await Fleet.start(cutout: [], bodyUpload: Data("not an image".utf8))
        _ = try await fleet.requestRender()
        let render = try await fleet.waitForRender()
        #expect(render.status == .failed && render.errorCode == "RENDER_FAILED", "\(fleet.logs)")
        // The person's upload, not the fleet: a failure that is not technical, and says which input.
        #expect(render.failureCode == "IMAGE_INVALID" && render.errorMessage?.contains("image.normalize") == true, "\(render)")
        // Well before its deadline: the sweep after the input died, not the deadline's.
        #expect(render.updatedAt < render.deadlineAt.addingTimeInterval(-10))
        let jobs = try await fleet.inputJobs(of: render)
        #expect(jobs.body.state == .dead && jobs.body.errors.first?.code == "IMAGE_INVALID")
        #expect(jobs.run.state == .cancelled && jobs.run.attempt == 0)
        #expect(jobs.run.errors.first?.code == "DEPENDENCY_FAILED")
        let credits = try await fleet.credits()
        #expect(credits.consumed == 0 && credits.ledger == ["reserve", "release"])
        #expect(fleet.fal.requests.isEmpty)
        await fleet.stop()
    }

    /// The issue's opening scenario: a garment sent through `garment.process` (its cut-out slowed
    /// to 3 s) and the render requested by the garment's id at once. The render runs after the
    /// image jobs still making its photos, which the dispatcher finds: fal is sent the cut-out.
    @Test func aRenderRequestedByIdRightAfterGarmentProcessWaitsForTheCutoutAndUsesIt() async throws {
        let fleet = try await Fleet.start(cutout: [.succeedAfter(.seconds(3))])
        let sent = try await fleet.processThenRequestRender()
        #expect(sent.render.status == .pending && sent.render.charged)
        let render = try await fleet.waitForRender()
        #expect(render.status == .complete && render.garmentCutout == true, "\(fleet.logs)")

        try fleet.expectOneSubmitOfTheStoredCutout()
        // Its job ran once, after the jobs still making its photos when it was requested: the
        // cut-out (3 s) surely, the normalisations unless already done. No attempt on a missing input.
        let run = try await fleet.expectRunOnceAtFirstAttempt(render)
        #expect(run.dependsOn.contains(sent.garment.cutoutJobId))
        #expect(Set(run.dependsOn).isSubset(of: [sent.body.jobId, sent.garment.jobId, sent.garment.cutoutJobId]), "\(run.dependsOn)")
        let cutout = try await fleet.job(sent.garment.cutoutJobId)
        #expect(cutout.kind == .garmentCutout && cutout.state == .completed && cutout.attempt == 1 && cutout.dependsOn == [sent.garment.jobId])
        #expect(fleet.rembg.requests.count == 1)

        let credits = try await fleet.credits()
        #expect(credits.consumed == 1 && credits.ledger == ["reserve", "consume"])
        await fleet.stop()
    }

    /// The garment's cut-out fails for good (the backend refuses the photo): the render waiting
    /// for it ends `RENDER_FAILED` with its credit released, and nothing is sent to fal.
    @Test func aRenderRequestedByIdFailsWithItsCreditReleasedWhenTheGarmentsCutoutFailsForGood() async throws {
        let fleet = try await Fleet.start(cutout: [.fail(status: 422)])
        // The image worker stopped while the render is requested: on a loaded machine the
        // remover's refusal could otherwise end the cut-out before the request looks for it, and
        // this test is about a render that runs after a cut-out failing for good. (A paused kind
        // would not do: admission refuses a render whose photos wait on one.)
        let images = fleet.processes[1]
        images.signal(SIGSTOP)
        let sent: (body: EnqueuedJobResult, garment: ProcessGarmentRequest.Result, render: RenderView)
        do {
            sent = try await fleet.processThenRequestRender()
        } catch {
            images.signal(SIGCONT)
            throw error
        }
        images.signal(SIGCONT)
        let render = try await fleet.waitForRender()
        #expect(render.status == .failed && render.errorCode == "RENDER_FAILED", "\(fleet.logs)")
        // A photo the fleet could not make: technical, whatever the remover said of it.
        #expect(render.failureCode == "INPUT_FAILED" && render.errorMessage?.contains("BACKGROUND_REMOVAL_REJECTED") == true, "\(render)")
        // Well before its deadline: the sweep after the cut-out died, not the deadline's.
        #expect(render.updatedAt < render.deadlineAt.addingTimeInterval(-10))
        let cutout = try await fleet.job(sent.garment.cutoutJobId)
        #expect(cutout.state == .dead && cutout.errors.first?.code == "BACKGROUND_REMOVAL_REJECTED", "\(cutout)")
        let run = try await fleet.endedJob(of: render)
        #expect(run.state == .cancelled && run.attempt == 0 && run.errors.first?.code == "DEPENDENCY_FAILED", "\(run)")
        let credits = try await fleet.credits()
        #expect(credits.consumed == 0 && credits.ledger == ["reserve", "release"])
        #expect(fleet.fal.requests.isEmpty)
        await fleet.stop()
    }

    /// The deadline as for a render with uploads: a cut-out of `garment.process` slower than the
    /// render's 30 s times the render out while it waits, credit released, and nothing runs it
    /// once the cut-out is made at last.
    @Test func aRenderRequestedByIdTimesOutWhileTheGarmentsCutoutIsSlowerThanItsDeadline() async throws {
        let fleet = try await Fleet.start(cutout: [.succeedAfter(.seconds(35))])
        let sent = try await fleet.processThenRequestRender()
        let render = try await fleet.waitForRender()
        #expect(render.status == .failed && render.errorCode == "RENDER_TIMEOUT", "\(fleet.logs)")
        let credits = try await fleet.credits()
        #expect(credits.consumed == 0 && credits.ledger == ["reserve", "release"])
        let run = try await fleet.endedJob(of: render)
        #expect(run.state == .cancelled && run.attempt == 0 && run.dependsOn.contains(sent.garment.cutoutJobId), "\(run)")
        try await fleet.q.waitUntil(timeout: .seconds(30), "the slow cut-out ended") { try await fleet.job(sent.garment.cutoutJobId).state.isTerminal }
        #expect(try await fleet.job(sent.garment.cutoutJobId).state == .completed)
        // The cut-out's ending statement settled its dependents: nothing can revive the run after it.
        #expect(try await fleet.job(run.id).state == .cancelled)
        #expect(fleet.fal.requests.isEmpty)
        await fleet.stop()
    }

    /// `after` on `render.request`: checked as `enqueue`'s (at most 100 ids, each an existing job
    /// that could still complete), a refusal creating nothing; accepted, the render runs after it.
    @Test func renderRequestsAfterMustNameJobsThatExistAndCanStillComplete() async throws {
        let fleet = try await Fleet.start(cutout: [])
        func request(_ after: [Int64]) async throws -> RenderView {
            try await fleet.client.send(RequestRenderRequest(
                renderId: "r1", userId: "u1", garmentId: "g1", bodyPhotoId: "b1", category: "tops",
                bodyUploadId: "upB", garmentUploadId: "upG", after: after))
        }
        let unknown: Int64 = 1 << 40
        await #expect(throws: DispatcherError(.badArgument, "invalid job: after names job \(unknown), which does not exist")) {
            try await request([unknown])
        }
        await #expect(throws: DispatcherError(.badArgument, "args.after names 101 jobs; at most 100")) {
            try await request(Array(1...101))
        }
        await #expect(throws: DispatcherError(.badArgument, "args.after names 0, which is no job id")) { try await request([0]) }
        let dead = try await fleet.client.send(NormalizeImageRequest(userId: "u1", uploadId: "no-such-upload", target: .body, imageId: "b9"))
        try await fleet.q.waitUntil("the normalisation of a missing upload died") { try await fleet.job(dead.jobId).state == .dead }
        await #expect(throws: DispatcherError(.badArgument, "invalid job: after names job \(dead.jobId), which already ended dead: it could never run")) {
            try await request([dead.jobId])
        }
        // Refused, nothing was created: no render, no reservation, no input job.
        #expect(try await RenderStore(pool: fleet.q.pool).render(id: "r1") == nil)
        #expect(try await fleet.credits().ledger.isEmpty)
        #expect(try await fleet.q.pool.query(
            "SELECT count(*) AS n FROM jobs WHERE kind IN ('image.normalize', 'garment.cutout', 'render.run')").rows[0].int("n") == 1)

        let gate = try await fleet.client.send(NormalizeImageRequest(
            userId: "u1", uploadId: "upB", target: .body, imageId: "b8", options: JobOptions(delaySeconds: 2)))
        let requested = try await request([gate.jobId])
        let render = try await fleet.waitForRender()
        #expect(render.status == .complete, "\(fleet.logs)")
        let run = try await fleet.job(try #require(requested.jobId))
        #expect(run.dependsOn.count == 4 && run.dependsOn.contains(gate.jobId))
        #expect(try await fleet.job(gate.jobId).state == .completed)
        await fleet.stop()
    }

    /// Renders waiting for their inputs count among the renders ahead at the provider: each will
    /// take a slot within seconds. With one slot and 8 s a render, the fourth render requested
    /// while three wait for their photos could not start by its latest start (30 − 5 − 8 = 17 s).
    @Test func rendersWaitingForTheirInputsCountAheadAtTheProvider() async throws {
        let q = try await TestQueue.make()
        try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('u1', 9)")
        let settings = try await RenderSettings.load(from: q.pool)
        try await q.driver.limitSet(ConcurrencyLimit(key: RenderCapacity.providerKey(settings.provider), maxRunning: 1), by: "test")
        try await q.pool.query("INSERT INTO provider_latency (provider, seconds, samples) VALUES ($1, 8, 20)", [settings.provider])
        let requests = RenderRequests(pool: q.pool, admission: .running(on: q.url))
        func request(_ id: String) async throws -> RenderRecord {
            var request = RenderRequest(
                renderID: try StorageID(id), requester: .user("u1"), ownerID: try StorageID("u1"), garmentID: try StorageID("g-\(id)"),
                bodyPhotoID: try StorageID("b1"), category: .tops)
            request.uploads = RenderUploads(garmentUploadID: try StorageID("up-\(id)"))
            return try await requests.request(request)
        }
        for id in ["r1", "r2", "r3"] {
            let render = try await request(id)
            #expect(try await q.queue.job(id: try #require(render.jobID))?.state == .waiting)
        }
        do {
            _ = try await request("r4")
            Issue.record("a fourth render was admitted behind three waiting for their inputs")
        } catch let RenderRequestError.busy(retryAfter) {
            // Three ahead on one slot, 8 s each: it would start after 24 s, 7 s past its latest start.
            #expect(retryAfter == 7)
        }
        #expect(try await RenderStore(pool: q.pool).render(id: "r4") == nil)
    }

    /// Admission counts the inputs' wait from the cut-outs' recent run times: when they leave no
    /// time for the render, the request is refused at once, nothing reserved or queued.
    @Test func aRenderWhoseInputsCannotBeReadyInTimeIsRefusedAtOnce() async throws {
        let q = try await TestQueue.make()
        try await q.pool.query("INSERT INTO credits (user_id, total_granted) VALUES ('u1', 2)")
        let requests = RenderRequests(pool: q.pool, admission: .running(on: q.url))
        func request(_ id: String, garmentUpload: String?) async throws -> RenderRecord {
            var request = RenderRequest(
                renderID: try StorageID(id), requester: .user("u1"), ownerID: try StorageID("u1"), garmentID: try StorageID("g-\(id)"),
                bodyPhotoID: try StorageID("b1"), category: .tops)
            request.uploads = RenderUploads(garmentUploadID: try garmentUpload.map(StorageID.init))
            return try await requests.request(request)
        }
        // Cut-outs are quick lately: admitted, with its three input jobs before it.
        try await q.pool.query("""
            INSERT INTO jobs (kind, payload, state, attempt, started_at, finished_at)
            SELECT 'garment.cutout', '{}', 'completed', 1, now() - interval '3 s', now() FROM generate_series(1, 20)
            """)
        let quick = try await request("r-quick", garmentUpload: "up1")
        #expect(try await q.queue.job(id: try #require(quick.jobID))?.dependsOn.count == 2)
        // Then 24 s each (the local provider takes 1 s; 30 s − 5 s of margin leave 24 s for inputs).
        try await q.pool.query("""
            INSERT INTO jobs (kind, payload, state, attempt, started_at, finished_at)
            SELECT 'garment.cutout', '{}', 'completed', 1, now() - interval '26 s', now() FROM generate_series(1, 20)
            """)
        let jobsBefore = try await q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n")
        // 1 s of normalisation + 26 s of cut-out against the latest start, 24 s: 3 s too late.
        do {
            _ = try await request("r-slow", garmentUpload: "up2")
            Issue.record("a render whose cut-out takes 26 s was admitted")
        } catch let RenderRequestError.busy(retryAfter) {
            #expect(retryAfter == 3)
        }
        #expect(try await q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == jobsBefore)
        #expect(try await RenderStore(pool: q.pool).render(id: "r-slow") == nil)
        #expect(try await q.pool.query("SELECT count(*) AS n FROM credit_reservations").rows[0].int("n") == 1)
        // A garment named by id whose cut-out is still queued (a `garment.process` sent just
        // before) waits as long: 26 s against 24, refused in its transaction, nothing left of it.
        _ = try await q.queue.enqueue(try NewJob(GarmentCutoutPayload(userID: try StorageID("u1"), garmentID: try StorageID("g-r-byid"))))
        do {
            _ = try await request("r-byid", garmentUpload: nil)
            Issue.record("a render behind a pending cut-out of 26 s was admitted")
        } catch let RenderRequestError.busy(retryAfter) {
            #expect(retryAfter == 2)
        }
        #expect(try await q.pool.query("SELECT count(*) AS n FROM jobs").rows[0].int("n") == jobsBefore + 1)
        #expect(try await RenderStore(pool: q.pool).render(id: "r-byid") == nil)
        #expect(try await q.pool.query("SELECT count(*) AS n FROM credit_reservations").rows[0].int("n") == 1)
        // Photos that exist already wait for nothing: admitted whatever the cut-outs take.
        #expect(try await request("r-ready", garmentUpload: nil).status == .pending)
    }

    @Test func theInputsWaitIsTheLongerOfTheBodyPhotoAndTheGarmentsTwoSteps() {
        let runTimes: [JobKind: Duration] = [.imageNormalize: .seconds(2), .garmentCutout: .seconds(5)]
        #expect(RenderInputs.expectedWait(for: RenderUploads(), runTimes: runTimes) == .zero)
        #expect(RenderInputs.expectedWait(for: RenderUploads(bodyUploadID: try! StorageID("b")), runTimes: runTimes) == .seconds(2))
        #expect(RenderInputs.expectedWait(for: RenderUploads(bodyUploadID: try! StorageID("b"), garmentUploadID: try! StorageID("g")),
                                          runTimes: runTimes) == .seconds(7))
        // Nothing on record: the assumed run times (1 s and 3 s).
        #expect(RenderInputs.expectedWait(for: RenderUploads(garmentUploadID: try! StorageID("g")), runTimes: [:]) == .seconds(4))
        // With no provider rule, only the inputs count: 30 − 5 − 1 s leaves 24 s for them.
        let idle = LimitLoad(rule: nil, running: 0, waiting: 0, startedInWindow: 0)
        #expect(RenderCapacity.retryAfter(load: idle, latency: .seconds(1), inputWait: .seconds(24), deadline: .seconds(30)) == nil)
        #expect(RenderCapacity.retryAfter(load: idle, latency: .seconds(1), inputWait: .seconds(26), deadline: .seconds(30)) == 2)
    }
}
