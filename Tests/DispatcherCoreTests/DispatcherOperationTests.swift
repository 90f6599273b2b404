import DispatcherCore
@testable import DispatcherProtocol
import FleetPostgres
import FleetStorage
import FleetSupport
@testable import FleetQueue
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Testing

/// Every job operation over a real socket, against a real PostgreSQL.
@Suite(.timeLimit(.minutes(2))) struct DispatcherOperationTests {
    @Test func pingAnswersOnBothTransports() async throws {
        try await TestDispatcher.run { dispatcher in
            for transport in [Transport.unix, .tcp] {
                let client = try await dispatcher.client(transport)
                #expect(client.greeting.authRequired == (transport == .tcp))
                #expect(client.greeting.version == WireFormat.version)
                #expect(Set(client.greeting.ops) == ["ping", "auth", "enqueue", "image.normalize", "garment.process", "account.purge",
                                                      "status", "wait", "cancel", "stats", "render.request", "render.status",
                                                      "render.wait", "render.feedback", "renders.list", "token.issue", "account.link", "credits.get", "render.retry",
                                                      "job.get", "jobs.list", "job.retry", "jobs.retry", "job.discard", "jobs.discard",
                                                      "queue.pause", "queue.resume", "audit.list", "limits.list", "limit.set", "limit.remove",
                                                      "jobs.enqueueGraph", "upload.presign", "image.url"])
                let pong = try await client.ping()
                #expect(pong.pong && abs(pong.serverTime.timeIntervalSinceNow) < 60)
                await client.close()
            }
        }
    }

    @Test func enqueueAppliesEveryOption() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let options = JobOptions(queue: "bulk", priority: 7, maxAttempts: 3, delaySeconds: 120, idempotencyKey: "order-1")
            let job = try await client.enqueue(kind: "drill.script", payload: ["sleepMs": .number(5), "note": .string("x")], options: options)
            #expect(job.isNew && job.kind == "drill.script")
            let again = try await client.enqueue(kind: "drill.script", options: JobOptions(idempotencyKey: "order-1"))
            #expect(again.jobId == job.jobId && !again.isNew)
            let status = try await client.status(jobId: job.jobId)
            #expect(status.queue == "bulk" && status.priority == 7 && status.maxAttempts == 3 && status.idempotencyKey == "order-1")
            #expect(status.payload == .object(["sleepMs": .number(5), "note": .string("x")]))
            #expect(status.state == .available && status.runAt.timeIntervalSince(status.createdAt) > 110)
            // Defaults when options are left out.
            let plain = try await client.status(jobId: try await client.enqueue(kind: "drill.noop").jobId)
            #expect(plain.queue == "default" && plain.priority == 2 && plain.maxAttempts == 5 && plain.idempotencyKey == nil)
            await client.close()
        }
    }

    @Test func enqueueRefusesBadJobsWithTypedCodes() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            await #expect(throws: DispatcherError.self) { try await client.enqueue(kind: "image.resize") }
            let cases: [(EnqueueRequest, DispatcherErrorCode, String)] = [
                (EnqueueRequest(kind: "image.resize"), .unknownKind, "unknown job kind 'image.resize'"),
                (EnqueueRequest(kind: "drill.noop", options: JobOptions(priority: 12)), .badArgument, "priority 12 is outside 0...9"),
                (EnqueueRequest(kind: "drill.noop", options: JobOptions(maxAttempts: 0)), .badArgument, "maxAttempts must be at least 1"),
                (EnqueueRequest(kind: "drill.noop", options: JobOptions(delaySeconds: -1)), .badArgument, "delaySeconds"),
                (EnqueueRequest(kind: "drill.noop", options: JobOptions(delaySeconds: 1e300)), .badArgument, "delaySeconds"),
                (EnqueueRequest(kind: "drill.noop", options: JobOptions(maxAttempts: Int(Int32.max) + 1)), .badArgument, "out of range"),
                (EnqueueRequest(kind: "drill.noop", options: JobOptions(idempotencyKey: "a\u{0}b")), .badArgument, "NUL"),
                (EnqueueRequest(kind: "drill.noop", payload: ["text": .string("a\u{0}b")]), .badArgument, "Unicode escape"),
            ]
            for (request, code, message) in cases {
                await #expect {
                    try await client.send(request)
                } throws: { error in
                    guard let error = error as? DispatcherError else { return false }
                    return error.code == code && error.message.contains(message)
                }
            }
            #expect(try await dispatcher.queue.states().isEmpty)
            await client.close()
        }
    }

    @Test func imageOperationsEnqueueTheImageWorkersKinds() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let normalize = try await client.send(NormalizeImageRequest(userId: "u1", uploadId: "up1", target: .body, imageId: "b1",
                                                                        options: JobOptions(priority: 0)))
            let garment = try await client.send(ProcessGarmentRequest(userId: "u1", uploadId: "up2", garmentId: "g1"))
            let purge = try await client.send(PurgeAccountRequest(userId: "u1"))
            #expect([normalize.kind, garment.kind, purge.kind] == ["image.normalize", "image.normalize", "account.purge"])
            let statuses = try await [normalize.jobId, garment.jobId, purge.jobId].asyncMap { try await client.status(jobId: $0) }
            #expect(statuses[0].payload == .object(["userId": .string("u1"), "uploadId": .string("up1"), "target": .string("body"),
                                                    "imageId": .string("b1")]))
            #expect(statuses[0].priority == 0)
            #expect(statuses[1].payload == .object(["userId": .string("u1"), "uploadId": .string("up2"), "target": .string("garment"),
                                                    "imageId": .string("g1")]))
            #expect(statuses[2].payload == .object(["userId": .string("u1")]))
            // The garment's cut-out was enqueued with its normalisation, waiting for it.
            let cutout = try await client.status(jobId: garment.cutoutJobId)
            #expect(cutout.kind == "garment.cutout" && cutout.state == .waiting && cutout.after == [garment.jobId])
            #expect(cutout.payload == .object(["userId": .string("u1"), "garmentId": .string("g1")]))
            // The image worker reads exactly these payloads.
            #expect(try JSONDecoder().decode(NormalizeImagePayload.self, from: Data(statuses[1].payload.jsonText.utf8)).thenCutout == nil)
            #expect(try JSONDecoder().decode(GarmentCutoutPayload.self, from: Data(cutout.payload.jsonText.utf8))
                    == GarmentCutoutPayload(userID: try StorageID("u1"), garmentID: try StorageID("g1")))
            // Ids that could leave the storage tree are refused before anything is enqueued.
            await #expect(throws: DispatcherError(.badArgument, "args.userId must be 1 to 64 characters of A-Z a-z 0-9 _ -")) {
                try await client.send(PurgeAccountRequest(userId: "../etc"))
            }
            await #expect(throws: DispatcherError(.badArgument, "args.garmentId must be 1 to 64 characters of A-Z a-z 0-9 _ -")) {
                try await client.send(ProcessGarmentRequest(userId: "u1", uploadId: "up2", garmentId: ""))
            }
            #expect(try await dispatcher.queue.states()[.available] == 3)
            #expect(try await dispatcher.queue.states()[.waiting] == 1)
            await client.close()
        }
    }

    /// `profile` over the socket: carried into the payload, checked against the profiles in
    /// `fleet_settings` as they are now (no restart), an unknown one refused naming the known ones.
    @Test func imageNormalizeCarriesAKnownProfileAndRefusesOthers() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client(.tcp)
            func normalize(_ profile: String?) async throws -> JSONValue {
                let job = try await client.send(NormalizeImageRequest(userId: "u1", uploadId: "up1", target: .body, imageId: "b1", profile: profile))
                return try await client.status(jobId: job.jobId).payload
            }
            #expect(try await normalize("thumb") == .object(["userId": .string("u1"), "uploadId": .string("up1"), "target": .string("body"),
                                                             "imageId": .string("b1"), "profile": .string("thumb")]))
            #expect(try JSONDecoder().decode(NormalizeImagePayload.self, from: Data(try await normalize("trial-room").jsonText.utf8)).profile == "trial-room")
            // No profile: none in the payload, so the worker's default (upload) applies.
            guard case .object(let plain) = try await normalize(nil) else { throw TestFailure("payload not an object") }
            #expect(plain["profile"] == nil)
            await #expect(throws: DispatcherError(.badArgument, #"args.profile: unknown image profile "poster" (known: thumb, trial-room, upload)"#)) {
                _ = try await normalize("poster")
            }
            await #expect(throws: DispatcherError(.badArgument, "args.profile must be 1 to 32 characters of a-z 0-9 -")) {
                _ = try await normalize("../Poster")
            }
            // An operator adds it: the running dispatcher accepts it at once.
            try await StoredNormalizeProfiles(pool: dispatcher.queue.pool).set("poster", to: NormalizeProfile(maxWidth: 1600))
            guard case .object(let poster) = try await normalize("poster") else { throw TestFailure("payload not an object") }
            #expect(poster["profile"] == .string("poster"))
            // The raw frame, as the Node client sends it.
            let refused = try await dispatcher.withRawConnection(.unix) { raw in
                try await raw.greeting()
                try await raw.send(#"{"id":1,"op":"image.normalize","args":{"userId":"u1","uploadId":"up1","target":"garment","imageId":"g1","profile":7}}"# + "\n")
                return try await raw.response()
            }
            #expect(refused.errorCode == "BAD_ARGUMENT" && refused["error"]?["message"] == .string("args.profile: expected a string"), "\(refused.jsonText)")
            #expect(try await dispatcher.queue.states()[.available] == 4)
            await client.close()
        }
    }

    @Test func statusAndCancelOfQueuedRunningFinishedAndMissingJobs() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            await #expect(throws: DispatcherError(.notFound, "no job 424242")) { try await client.status(jobId: 424242) }
            await #expect(throws: DispatcherError(.notFound, "no job 424242")) { try await client.cancel(jobId: 424242) }

            let queued = try await client.enqueue(kind: "drill.noop")
            #expect(try await client.cancel(jobId: queued.jobId) == .init(outcome: .cancelled, state: .cancelled, workerId: nil))
            #expect(try await client.cancel(jobId: queued.jobId) == .init(outcome: .alreadyFinished, state: .cancelled, workerId: nil))

            let running = try await client.enqueue(kind: "drill.script")
            _ = try await dispatcher.queue.driver.jobClaim(ClaimRequest(owner: "w1", lease: .seconds(30), slots: [.drillScript: 1])).jobs
            let status = try await client.status(jobId: running.jobId)
            #expect(status.state == .running && status.workerId == "w1" && status.attempt == 1 && status.startedAt != nil)
            #expect(try await client.cancel(jobId: running.jobId) == .init(outcome: .requested, state: .running, workerId: "w1"))
            #expect(try await client.status(jobId: running.jobId).cancelRequested)
            await client.close()
        }
    }

    @Test func statsShowDepthLagFailuresAndLiveWorkers() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let q = dispatcher.queue
            _ = try await q.queue.enqueue((0..<3).map { _ in NewJob(kind: .drillNoop) })
            _ = try await q.queue.enqueue(NewJob(kind: .drillNoop, delay: .seconds(600)))
            let failing = try await q.queue.enqueue(NewJob(kind: .drillScript, maxAttempts: 1))
            try await q.travelInTime(.seconds(30))
            try await q.driver.workerRegister(WorkerRecord(id: "w1", host: "h", pid: 7, executable: "fleet-drill", kinds: [.drillScript]))
            try await q.driver.workerRegister(WorkerRecord(id: "gone", host: "h", pid: 8, executable: "fleet-drill", kinds: [.drillNoop]))
            try await q.driver.workerStop(id: "gone")
            _ = try await q.driver.jobClaim(ClaimRequest(owner: "w1", lease: .seconds(30), slots: [.drillScript: 1])).jobs
            let stats1 = try await client.stats()
            #expect(stats1.workers.map(\.id) == ["w1"])
            #expect(stats1.workers[0].running == 1 && stats1.workers[0].kinds == ["drill.script"] && stats1.workers[0].pid == 7)
            _ = try await q.driver.jobFinishMany(owner: "w1", outcomes: [JobOutcome(jobID: failing.id, attempt: 1, kind: .dead(error: "boom", code: nil))])

            let stats = try await client.stats(windowSeconds: 600)
            #expect(stats.windowSeconds == 600)
            let noop = try #require(stats.kinds.first { $0.kind == "drill.noop" })
            #expect(noop.due == 3 && noop.scheduled == 1 && noop.running == 0)
            #expect((noop.oldestDueSeconds ?? 0) >= 29)
            let script = try #require(stats.kinds.first { $0.kind == "drill.script" })
            #expect(script.dead == 1 && script.due == 0 && script.oldestDueSeconds == nil)
            await #expect(throws: DispatcherError.self) { try await client.stats(windowSeconds: 0) }
            await client.close()
        }
    }

    /// `wait` is woken by the queue's notification when a worker finishes the job, long before its timeout.
    @Test func waitReturnsWhenTheJobCompletes() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let job = try await client.enqueue(kind: "drill.noop")
            async let waited = client.wait(jobId: job.jobId, timeoutMs: 60_000)
            try await dispatcher.waitUntilWaited(.job(job.jobId))
            let claimed = try await dispatcher.queue.driver.jobClaim(ClaimRequest(owner: "w1", lease: .seconds(30), slots: [.drillNoop: 1])).jobs
            #expect(claimed.map(\.id) == [job.jobId])
            _ = try await dispatcher.queue.driver.jobFinishMany(owner: "w1", outcomes: [
                JobOutcome(jobID: job.jobId, attempt: 1, kind: .completed(result: #"{"done":true}"#))])
            let result = try await waited
            // Not timed out: the notification woke it (job waits have no periodic look).
            #expect(!result.timedOut && result.job.state == .completed && result.job.result == .object(["done": .bool(true)]))
            // An already finished job answers at once.
            #expect(try await client.wait(jobId: job.jobId, timeoutMs: 60_000).job.state == .completed)
            await client.close()
        }
    }

    @Test func waitReturnsOnCancelAndOnDeadAndTimesOut() async throws {
        try await TestDispatcher.run { dispatcher in
            let client = try await dispatcher.client()
            let cancelled = try await client.enqueue(kind: "drill.noop")
            async let waitedCancel = client.wait(jobId: cancelled.jobId, timeoutMs: 60_000)
            try await dispatcher.waitUntilWaited(.job(cancelled.jobId))
            _ = try await client.cancel(jobId: cancelled.jobId)
            #expect(try await waitedCancel.job.state == .cancelled)

            // A lease that runs out on the last attempt: the rescuer makes it dead.
            let rescued = try await client.enqueue(kind: "drill.noop", options: JobOptions(maxAttempts: 1))
            _ = try await dispatcher.queue.driver.jobClaim(ClaimRequest(owner: "w1", lease: .seconds(30), slots: [.drillNoop: 1])).jobs
            async let waitedDead = client.wait(jobId: rescued.jobId, timeoutMs: 60_000)
            try await dispatcher.waitUntilWaited(.job(rescued.jobId))
            try await dispatcher.queue.travelInTime(.seconds(31))
            _ = try await dispatcher.queue.driver.jobRescueExpired(limit: 10)
            #expect(try await waitedDead.job.state == .dead)

            let pending = try await client.enqueue(kind: "drill.noop")
            let started = ContinuousClock.now
            let timedOut = try await client.wait(jobId: pending.jobId, timeoutMs: 400)
            #expect(timedOut.timedOut && timedOut.job.state == .available)
            #expect(ContinuousClock.now - started >= .milliseconds(400))
            await #expect(throws: DispatcherError(.notFound, "no job 999999")) { try await client.wait(jobId: 999_999) }
            await #expect(throws: DispatcherError.self) { try await client.wait(jobId: pending.jobId, timeoutMs: 10_000_000) }
            await client.close()
        }
    }

    /// Finishing, cancelling, rescuing to dead and sweeping send the ids of waited-for jobs on
    /// `fleet_jobs_finished`, batched: one statement finishing 1,000 jobs sends a handful of
    /// notifications, not 1,000.
    @Test func terminalTransitionsNotifyTheirIdsInBatches() async throws {
        let q = try await TestQueue.make()
        let listening = TestNotifier(url: q.url)
        defer { listening.stop() }
        var events = listening.events([QueueChannel.finished.name])
        #expect(await events.next() == .mightHaveMissed)

        for job in try await q.queue.enqueue((0..<1000).map { _ in NewJob(kind: .drillNoop) }) { try await q.queue.watchFinish(id: job.id) }
        let claimed = try await q.driver.jobClaim(ClaimRequest(owner: "w", lease: .seconds(30), slots: [.drillNoop: 1000])).jobs
        var outcomes = claimed.map { JobOutcome(jobID: $0.id, attempt: 1, kind: .completed(result: nil)) }
        // A retry is not terminal: it must not be announced.
        outcomes[0] = JobOutcome(jobID: claimed[0].id, attempt: 1, kind: .retry(error: "again", code: nil, retryIn: .seconds(60)))
        _ = try await q.driver.jobFinishMany(owner: "w", outcomes: outcomes)
        var announced: [Int64] = []
        var notifications = 0
        while announced.count < 999, case .notification(_, let payload)? = await events.next() {
            notifications += 1
            announced += payload.split(separator: ",").map { Int64($0)! }
        }
        #expect(Set(announced) == Set(claimed.dropFirst().map(\.id)))
        #expect(notifications == 4) // ceil(999 / 300)

        let queued = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        try await q.queue.watchFinish(id: queued.id)
        _ = try await q.queue.cancel(id: queued.id)
        #expect(await events.next() == .notification(channel: QueueChannel.finished.name, payload: "\(queued.id)"))
        let unknown = try await q.pool.query(
            "INSERT INTO jobs (kind, created_at) VALUES ('image.resize', now() - interval '1 hour') RETURNING id").rows[0].int64("id")
        try await q.queue.watchFinish(id: unknown)
        let swept = try await q.driver.jobKillUnknownKinds(known: [.drillNoop], grace: .seconds(60))
        #expect(await events.next() == .notification(channel: QueueChannel.finished.name, payload: "\(swept[0])"))
    }

    /// A job nobody waits for ends without a notification; one marked by a `wait`, or one that
    /// held a limited slot (workers of limited kinds claim again), sends its id. Notifications
    /// arrive in commit order, so the first must be the watched job's.
    @Test func onlyWaitedForOrLimitedJobsNotifyTheirEnd() async throws {
        let q = try await TestQueue.make()
        let listening = TestNotifier(url: q.url)
        defer { listening.stop() }
        var events = listening.events([QueueChannel.finished.name])
        #expect(await events.next() == .mightHaveMissed)

        let unwatched = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        let watched = try await q.queue.enqueue(NewJob(kind: .drillNoop))
        let limited = try await q.queue.enqueue(NewJob(kind: .drillNoop, limitKeys: ["user:u1"]))
        try await q.queue.watchFinish(id: watched.id)
        let claimed = try await q.driver.jobClaim(ClaimRequest(owner: "w", lease: .seconds(30), slots: [.drillNoop: 3])).jobs
        #expect(claimed.count == 3)
        for id in [unwatched.id, watched.id, limited.id] {
            _ = try await q.driver.jobFinishMany(owner: "w", outcomes: [JobOutcome(jobID: id, attempt: 1, kind: .completed(result: nil))])
        }
        #expect(await events.next() == .notification(channel: QueueChannel.finished.name, payload: "\(watched.id)"))
        #expect(await events.next() == .notification(channel: QueueChannel.finished.name, payload: "\(limited.id)"))
        #expect(try await q.pool.query("SELECT count(*) AS n FROM jobs WHERE state = 'completed'").rows[0].int("n") == 3)
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}
