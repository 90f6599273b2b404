import FakeProviders
import FleetHTTPClient
import FleetPostgres
@testable import FleetQueue
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Imaging
@testable import Providers
@testable import Renders
import Testing

/// Admission with renders hanging at the provider (issue 38, item 2): a real `render-worker`
/// against the fake fal, 4 slots, 19 provider fault modes, two SIGKILLs of the worker while
/// renders hang; a render whose provider answers within its normal time completes or is refused
/// `RENDER_BUSY` at once, never accepted and then timed out.
@Suite(.serialized) struct HangingRenderAdmissionTests {
    /// One way the fake fal answers, given to the renders that send its photo.
    struct FaultMode: Sendable {
        let name: String
        /// The provider answers within its normal time: the render must complete, or be refused.
        let normal: Bool
        let behavior: FakeFal.Behavior
    }

    static func mode(_ name: String, normal: Bool = false, _ change: (inout FakeFal.Behavior) -> Void = { _ in }) -> FaultMode {
        var behavior = FakeFal.Behavior()
        change(&behavior)
        return FaultMode(name: name, normal: normal, behavior: behavior)
    }

    /// Asked in this order: the answers and the quick faults first, then the slow answers, then
    /// the renders that hang at the provider, which hold the 4 slots when the worker is killed.
    static let mix: [FaultMode] = [
        mode("answer in 300 ms", normal: true) { $0.latency = .milliseconds(300) },
        mode("answer in 1 s", normal: true) { $0.latency = .seconds(1) },
        mode("503 on every submit") { $0.transientSubmitFailures = 1 },
        mode("422 rejection") { $0.rejection = FakeFal.Rejection(field: "model_image", message: "no person found") },
        mode("submit answered with an HTML page") { $0.malformed = [.submit: .htmlPage] },
        mode("job fails 500, retryable") { $0.jobFailure = FakeFal.JobFailure(status: 500, errorType: "internal_error", detail: "GPU fell over", retryable: true) },
        mode("job fails 500, not retryable") {
            $0.jobFailure = FakeFal.JobFailure(status: 500, errorType: "internal_error", detail: "model crashed", retryable: false)
        },
        mode("job fails 422, content policy") { $0.jobFailure = FakeFal.JobFailure(status: 422, errorType: "content_policy_violation", detail: "flagged") },
        mode("job fails 504") { $0.jobFailure = FakeFal.JobFailure(status: 504, errorType: "timeout", detail: "inference timed out") },
        mode("status answered with an HTML page") { $0.malformed = [.status: .htmlPage] },
        mode("status with values of the wrong type") { $0.malformed = [.status: .wrongTypes] },
        mode("result cut off halfway") { $0.malformed = [.result: .truncated] },
        mode("result answered with an HTML page") { $0.malformed = [.result: .htmlPage] },
        mode("result not an image") { $0.resultImage = Data("not an image".utf8) },
        mode("answer in 3 s") { $0.latency = .seconds(3) },
        mode("hang 20 s") { $0.latency = .seconds(20) },
        mode("hang 25 s") { $0.latency = .seconds(25) },
        mode("answer in 40 s, past the deadline") { $0.latency = .seconds(40) },
        mode("never answer") { $0.neverFinish = true },
    ]
    static let hangs = Set(["hang 20 s", "hang 25 s", "answer in 40 s, past the deadline", "never answer"])
    /// The renders asked behind the hanging ones, and once they ended.
    static let burst = mode("answer in 1 s", normal: true) { $0.latency = .seconds(1) }

    @Test func aRenderWhoseProviderAnswersInItsNormalTimeCompletesOrIsRefusedAtOnceAfterTwoKills() async throws {
        let fal = try await FakeFal.start()
        defer { Task { await fal.stop() } }
        let f = try await RenderFixture.make(provider: FashnProvider.name, fal: fal)
        try await f.grant("u1", credits: 500)
        try await f.q.driver.limitSet(ConcurrencyLimit(key: RenderCapacity.providerKey(FashnProvider.name), maxRunning: 4), by: "test")
        // Each mode its own body photo (the same picture at another JPEG quality): the fake knows a
        // render's mode by the photo it sends, whichever render submits first.
        let modes = Self.mix + [Self.burst]
        var byPhoto: [String: FakeFal.Behavior] = [:]
        var answeringPhotos: Set<String> = []
        for (index, mode) in modes.enumerated() {
            let photo = try RenderImage.normalize(RenderFixture.bodyPhoto, quality: 60 + index)
            try await f.storage.write(photo, to: .bodyPhoto(user: StorageID("u1"), photo: StorageID("b\(index)")))
            byPhoto[photo.dataURI(mimeType: "image/jpeg")] = mode.behavior
            if mode.normal { answeringPhotos.insert(photo.dataURI(mimeType: "image/jpeg")) }
        }
        #expect(byPhoto.count == modes.count, "a photo per mode")
        let behaviors = byPhoto
        fal.chooseBehavior { body in
            ((try? JSONSerialization.jsonObject(with: body)) as? [String: Any])?["model_image"].flatMap { $0 as? String }.flatMap { behaviors[$0] }
        }

        let reaper = RunningReaper(f.q.driver)
        defer { reaper.stop() }
        var workers = [try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: f.workerEnvironment)]
        defer { for worker in workers { worker.signal(SIGKILL) } }

        /// Every render asked: its mode, and whether it was refused at once (its retry-after).
        var asked: [(id: String, mode: FaultMode, refusedAfter: Int?)] = []
        let requests = f.requests
        let request: @Sendable (_ id: String, _ mode: Int) async throws -> Int? = { id, index in
            do {
                _ = try await requests.request(RenderRequest(
                    renderID: StorageID(id), requester: .user("u1"), ownerID: StorageID("u1"), garmentID: StorageID("g1"),
                    bodyPhotoID: StorageID("b\(index)"), category: .tops))
                return nil
            } catch RenderRequestError.busy(let seconds) {
                return seconds
            }
        }
        func render(_ id: String) async throws -> RenderRecord { try #require(try await f.store.render(id: try StorageID(id))) }
        func allEnded(_ ids: [String]) async throws -> Bool {
            for id in ids where !(try await render(id)).status.isTerminal { return false }
            return true
        }

        // A render first, so that admission knows the provider's run time instead of assuming 12 s.
        asked.append(("warm", Self.burst, try await request("warm", modes.count - 1)))
        try await f.q.waitUntil(timeout: .seconds(60), "the first render ended") { try await allEnded(["warm"]) }
        try await f.q.waitUntil("its run time on record") {
            try await f.q.pool.query("SELECT 1 FROM provider_latency WHERE provider = $1", [FashnProvider.name]).rows.count == 1
        }

        // The fault mix, one render each.
        for (index, mode) in Self.mix.enumerated() {
            let id = "mix\(index)"
            asked.append((id, mode, try await request(id, index)))
        }
        let hanging = asked.filter { Self.hangs.contains($0.mode.name) && $0.refusedAfter == nil }.map(\.id)
        #expect(hanging.count == 4, "the hanging renders admitted: \(asked.map { ($0.id, $0.refusedAfter) })")

        // The four hanging renders hold the four slots; the worker is killed, a second takes them
        // over, is killed, and a third takes them over (those still open: one answers in 20 s).
        func heldBy(_ worker: WorkerProcess) async throws -> Bool {
            for id in hanging {
                let row = try await render(id)
                if row.status.isTerminal { continue }
                guard let job = row.jobID, try await f.q.leaseOwnerPID(of: job) == worker.pid, row.providerJobID != nil else { return false }
            }
            return true
        }
        try await f.q.waitUntil(timeout: .seconds(60), "the hanging renders at fal on the first worker") { try await heldBy(workers[0]) }
        for kill in 0..<2 {
            workers.append(try WorkerProcess(databaseURL: f.q.url, executable: "render-worker", environment: f.workerEnvironment))
            try await f.q.waitUntilLocked([workers[kill + 1]])
            _ = try await f.q.kill(workers[kill], thenTimeUntil: "the hanging renders taken over", limit: .seconds(20)) {
                try await heldBy(workers[kill + 1])
            }
            #expect(await workers[kill].wait() != 0)
        }
        // Until each hanging render is past twice the provider's mean run time: from then on nothing
        // on record says it will answer before its deadline.
        try await f.q.waitUntil(timeout: .seconds(30), "the hanging renders past twice the mean run time") {
            try await f.q.pool.query("""
                SELECT bool_and(now() - r.started_at > 2 * make_interval(secs => l.seconds)) AS overdue
                FROM renders r JOIN provider_latency l ON l.provider = r.provider WHERE r.id = ANY($1::text[])
                """, [PostgresArray(hanging)]).rows[0]["overdue"] == "t"
        }
        var stillHanging = 0
        for id in hanging where !(try await render(id)).status.isTerminal { stillHanging += 1 }
        #expect(try await f.q.pool.query("""
            SELECT count(*) AS n FROM jobs WHERE kind = 'render.run' AND state = 'running'
            """).rows[0].int("n") == stillHanging, "the slots held by the hanging renders alone")

        // The burst behind them: 60 renders whose provider answers in 1 s.
        let burstIndex = modes.count - 1
        let burst = try await withThrowingTaskGroup(of: (String, Int?).self) { group in
            for index in 0..<60 {
                group.addTask { ("burst\(index)", try await request("burst\(index)", burstIndex)) }
            }
            return try await group.reduce(into: [(String, Int?)]()) { $0.append($1) }
        }
        asked += burst.map { ($0.0, Self.burst, $0.1) }

        // Once everything asked so far ended, renders asked again all fit.
        let admitted = asked.filter { $0.refusedAfter == nil }.map(\.id)
        try await f.q.waitUntil(timeout: .seconds(90), "every admitted render ended") { try await allEnded(admitted) }
        for index in 0..<8 {
            asked.append(("after\(index)", Self.burst, try await request("after\(index)", burstIndex)))
        }
        let after = asked.suffix(8)
        #expect(after.allSatisfy { $0.refusedAfter == nil }, "refused once the slots were free: \(after.map(\.refusedAfter))")
        try await f.q.waitUntil(timeout: .seconds(60), "the last renders ended") { try await allEnded(after.map(\.id)) }

        // What the rows say of every render asked.
        var outcomes: [String: [String]] = [:]
        var unfinishedNormal: [String] = []
        var completed = 0
        for entry in asked {
            let outcome: String
            if let seconds = entry.refusedAfter {
                outcome = "RENDER_BUSY (retry after \(seconds) s)"
                #expect(try await f.store.render(id: try StorageID(entry.id)) == nil, "a refused render left a row: \(entry.id)")
            } else {
                let row = try await render(entry.id)
                outcome = row.status == .complete ? "complete" : "\(row.errorCode ?? "?") \(row.failureCode ?? "")"
                if row.status == .complete { completed += 1 }
                if entry.mode.normal && row.status != .complete { unfinishedNormal.append("\(entry.id): \(outcome) \(row.errorMessage ?? "")") }
            }
            outcomes[entry.mode.name, default: []].append(outcome)
        }
        for (mode, ends) in outcomes.sorted(by: { $0.key < $1.key }) {
            print("hanging render admission: \(mode): \(Dictionary(grouping: ends, by: { $0 }).mapValues(\.count).sorted { $0.key < $1.key })")
        }
        #expect(unfinishedNormal.isEmpty, "renders whose provider answers in its normal time, accepted and not completed: \(unfinishedNormal)")

        // At the wire: one submit per completed render of the answering modes (none paid twice);
        // credits exact: one consumed per completed render, none left reserved.
        let answeringIDs = modes.indices.filter { modes[$0].normal }.map { "b\($0)" }
        let normalCompleted = try await f.q.pool.query("""
            SELECT count(*) AS n FROM renders WHERE status = 'complete' AND body_photo_id = ANY($1::text[])
            """, [PostgresArray(answeringIDs)]).rows[0].int("n")
        let normalSubmits = fal.requests.filter { $0.method == "POST" && ($0.json?["model_image"] as? String).map(answeringPhotos.contains) == true }.count
        #expect(normalSubmits == normalCompleted, "\(normalSubmits) submits for \(normalCompleted) completed renders")
        let credits = try await f.credits("u1")
        #expect(credits.consumed == completed && credits.reserved == 0, "\(credits), \(completed) completed")

        let burstRefused = burst.filter { $0.1 != nil }.count
        print("""
            hanging render admission: \(asked.count) renders asked, \(asked.filter { $0.refusedAfter != nil }.count) refused at once \
            (of the 60 behind the hanging renders: \(burstRefused) refused, \(60 - burstRefused) admitted), \(completed) completed
            """)
        for worker in workers.suffix(1) {
            worker.signal(SIGTERM)
            #expect(await worker.wait() == 0, "\(worker.log)")
        }
    }
}
