@testable import DispatcherProtocol
import FakeProviders
import FleetHTTPClient
import FleetStorage
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Imaging
@testable import Providers
@testable import Renders
import Testing

/// Why renders fail, where operators look, and what a failure costs an onboarding token: over the
/// dispatcher's socket with a `render-worker` process rendering at a fake fal.
@Suite(.serialized) struct RenderFailureTests {
    /// The dispatcher served in-process, a render worker process polling fal every 100 ms, and a
    /// storage tree the workers read the onboarding photos from.
    struct Fleet {
        let dispatcher: TestDispatcher
        let client: DispatcherClient
        let fal: FakeFal
        let worker: WorkerProcess
        let storage: FileImageStorage

        static func run(_ body: (Fleet) async throws -> Void) async throws {
            try await TestDispatcher.run { dispatcher in
                let fal = try await FakeFal.start()
                fal.update { $0.latency = .milliseconds(100) }
                try await RenderSettings(provider: FashnProvider.name, enabledCategories: Set(GarmentCategory.allCases)).save(to: dispatcher.queue.pool)
                let root = temporaryPath("images")
                let worker = try WorkerProcess(databaseURL: dispatcher.queue.url, executable: "render-worker", environment: [
                    "FLEET_STORAGE_ROOT": root, "FAL_KEY": fal.key, "FAL_QUEUE_URL": fal.baseURL,
                    "FLEET_RENDER_WEBHOOK_GRACE_MS": "0", "FLEET_RENDER_POLL_MS": "100",
                ])
                let client = try await dispatcher.client()
                let fleet = Fleet(dispatcher: dispatcher, client: client, fal: fal, worker: worker, storage: FileImageStorage(root: root))
                defer {
                    worker.signal(SIGKILL)
                    try? FileManager.default.removeItem(atPath: root)
                }
                try await body(fleet)
                await client.close()
                await fal.stop()
            }
        }

        /// A new onboarding token, its photos normalised into its tree as the app's upload would.
        func issueToken() async throws -> IssueTokenRequest.Result {
            let issued = try await client.send(IssueTokenRequest())
            let owner = try StorageID(issued.tokenId)
            try await storage.write(RenderFixture.bodyPhoto, to: .bodyPhoto(user: owner, photo: StorageID("b1")))
            try await storage.write(try await LocalBackgroundRemover().cutout(of: plainBackgroundGarment), to: .garmentCutout(user: owner, garment: StorageID("g1")))
            return issued
        }

        func request(_ id: String, token: String) async throws -> RenderView {
            try await client.send(RequestRenderRequest(renderId: id, ephemeralToken: token, garmentId: "g1", bodyPhotoId: "b1", category: "tops"))
        }

        /// Requests `id` on `token` and waits for its end.
        func render(_ id: String, token: String) async throws -> RenderView {
            _ = try await request(id, token: token)
            let waited = try await client.send(WaitRenderRequest(renderId: id, timeoutMs: 30_000))
            #expect(!waited.timedOut, "worker log: \(worker.log)")
            return waited.render
        }

        /// The refusal `body` ends with: its code and message.
        func refusal(_ body: () async throws -> some Any) async -> (code: String, message: String)? {
            do { _ = try await body(); return nil } catch let error as DispatcherError { return (error.code.rawValue, error.message) } catch {
                return ("\(error)", "")
            }
        }
    }

    /// A render failed by the provider's 5xx (twice: its one retry spent) gives the token its render
    /// back: a new render id is accepted and completes, after which the token is used. A render
    /// the provider refuses for its photo (422) spends the token.
    @Test func aTechnicalFailureGivesTheTokenItsRenderBackAndARefusalDoesNot() async throws {
        try await Fleet.run { fleet in
            let token = try await fleet.issueToken().token
            fleet.fal.update { $0.transientSubmitFailures = 2 }
            let failed = try await fleet.render("t1", token: token)
            #expect(failed.status == .failed && failed.errorCode == "RENDER_FAILED" && failed.failureCode == "PROVIDER_DOWN", "\(failed)")
            #expect(failed.errorMessage?.contains("HTTP 503") == true, "\(failed)")
            // Asked again with its id, the failed render is the answer, not a new one.
            #expect(try await fleet.request("t1", token: token).status == .failed)
            let again = try await fleet.render("t2", token: token)
            #expect(again.status == .complete && again.failureCode == nil && again.errorMessage == nil, "\(again)")
            let used = await fleet.refusal { try await fleet.request("t3", token: token) }
            #expect(used?.code == "TOKEN_ALREADY_USED", "\(String(describing: used))")
            #expect(fleet.fal.requests.filter { $0.method == "POST" }.count == 3, "two 503s, then t2's one submit")

            let refused = try await fleet.issueToken().token
            fleet.fal.update { $0.rejection = .init(field: "model_image", message: "person not detected") }
            let rejected = try await fleet.render("t4", token: refused)
            #expect(rejected.status == .failed && rejected.failureCode == "PROVIDER_REJECTED", "\(rejected)")
            #expect(rejected.errorMessage?.contains("person not detected") == true, "\(rejected)")
            let spent = await fleet.refusal { try await fleet.request("t5", token: refused) }
            #expect(spent?.code == "TOKEN_ALREADY_USED", "\(String(describing: spent))")
        }
    }

    /// A provider that stays down cannot be looped through one token: after three technical
    /// failures the token is refused, saying why.
    @Test func aTokenGetsAtMostThreeRendersBackFromTechnicalFailures() async throws {
        try await Fleet.run { fleet in
            let token = try await fleet.issueToken().token
            fleet.fal.update { $0.transientSubmitFailures = 1000 }
            for id in ["b1", "b2", "b3"] {
                let failed = try await fleet.render(id, token: token)
                #expect(failed.status == .failed && failed.failureCode == "PROVIDER_DOWN", "\(failed)")
            }
            let refusal = await fleet.refusal { try await fleet.request("b4", token: token) }
            #expect(refusal?.code == "TOKEN_ALREADY_USED", "\(String(describing: refusal))")
            #expect(refusal?.message.contains("technical reasons 3 times") == true, "\(String(describing: refusal))")
            #expect(EphemeralTokens.technicalFailuresAllowed == 3)
            #expect(fleet.fal.requests.filter { $0.method == "POST" }.count == 6, "two submits per render, none for b4")
            // Nothing of b4 was made.
            #expect(await fleet.refusal { try await fleet.client.send(RenderStatusRequest(renderId: "b4")) }?.code == "NOT_FOUND")
        }
    }

    /// A failed render's job ends `dead` with the failure's code and message, so the queue's
    /// counts and the dead list (by kind and by code) show it.
    @Test func aFailedRendersJobIsDeadWithItsFailureWhereOperatorsLook() async throws {
        try await Fleet.run { fleet in
            let token = try await fleet.issueToken().token
            fleet.fal.update { $0.transientSubmitFailures = 2 }
            let failed = try await fleet.render("d1", token: token)
            let jobID = try #require(failed.jobId)
            // The render ends first; its job's outcome is written just after.
            try await fleet.dispatcher.queue.waitUntil(timeout: .seconds(20), "the render's job ended") {
                try await fleet.client.send(JobGetRequest(jobId: jobID)).isTerminal
            }
            let job = try await fleet.client.send(JobGetRequest(jobId: jobID))
            #expect(job.state == .dead && job.attempt == 1, "\(job)")
            #expect(job.errors.last?.code == "PROVIDER_DOWN" && job.errors.last?.error == failed.errorMessage, "\(job)")
            let dead = try await fleet.client.send(JobsListRequest(filter: JobFilterArguments(states: [.dead], kinds: ["render.run"])))
            #expect(dead.jobs.map(\.id) == [jobID])
            let byCode = try await fleet.client.send(JobsListRequest(filter: JobFilterArguments(states: [.dead], errorCode: "PROVIDER_DOWN")))
            #expect(byCode.jobs.map(\.id) == [jobID])
            let stats = try await fleet.client.send(StatsRequest())
            #expect(stats.kinds.first { $0.kind == "render.run" }?.dead == 1, "\(stats.kinds)")
        }
    }
}
