import FleetHTTPClient
import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// A fourth provider, declared as the real ones are (its `registration`) and named by no generic
/// code: asynchronous like fal (a ticket in JSON of its own, kept on the render's row), calling
/// back through a webhook source of its own with a body of its own shape. Adding it touched
/// nothing but this file: the render run, the store and the webhook route ask it.
struct TicketTryOnProvider: TryOnProvider {
    static let name = "ticket-vto"
    static let source = "ticket"
    static let registration = TryOnProviderRegistration(
        name: name, categories: [.tops], webhookSources: { _, _ in [TicketWebhookSource()] }, make: { _, _ in TicketTryOnProvider() })

    var name: String { Self.name }
    var supportedCategories: Set<GarmentCategory> { [.tops] }
    var webhookSource: String? { Self.source }

    func submit(_ request: TryOnRequest) async throws(ProviderError) -> ProviderSubmission {
        let ticket = "ticket-\(UUID().uuidString.lowercased())"
        return ProviderSubmission(provider: name, jobID: ticket, state: .running(.object(["ticket": .string(ticket)])))
    }

    /// Never done when polled: only its callback ends a job.
    func result(of submission: ProviderSubmission) async throws(ProviderError) -> ProviderResult {
        guard case .running(let state) = submission.state, state["ticket"] == .string(submission.jobID) else {
            throw ProviderError.malformedResponse(provider: name, reason: "not a ticket submission")
        }
        return .pending
    }

    func cancel(_ submission: ProviderSubmission) async {}

    /// `{"ticket": …, "jpeg": base64}`.
    func result(ofCallback payload: Data) throws(ProviderError) -> ProviderResult {
        guard let body = try? JSONValue(json: String(decoding: payload, as: UTF8.self)), case .string(let jpeg)? = body["jpeg"],
              let bytes = Data(base64Encoded: jpeg)
        else { throw ProviderError.malformedResponse(provider: name, reason: "not a ticket callback") }
        return .succeeded(.bytes(bytes, mimeType: "image/jpeg"))
    }
}

/// `POST /webhooks/ticket`: unsigned (a test's), one event per ticket.
struct TicketWebhookSource: WebhookSource {
    let provider = TicketTryOnProvider.source

    func event(headers: [String: String], body: Data) async throws(WebhookRejection) -> ProviderEvent {
        guard let value = try? JSONValue(json: String(decoding: body, as: UTF8.self)), case .string(let ticket)? = value["ticket"] else {
            throw WebhookRejection(status: 400, reason: "not a ticket callback")
        }
        return ProviderEvent(key: ticket, announce: ticket)
    }
}

@Suite struct FourthProviderTests {
    @Test func aProviderRegisteredLikeTheOthersRunsARenderThroughItsOwnStateAndWebhook() async throws {
        let registered = TryOnProviders.registered + [TicketTryOnProvider.registration]
        #expect(!TryOnProviders.names.contains(TicketTryOnProvider.name))
        let f = try await RenderFixture.make(provider: TicketTryOnProvider.name, registered: registered)
        try await f.grant("u1", credits: 1)
        await #expect(throws: RenderRequestError.self) { try await f.request("r0", category: .shoes) }
        let render = try await f.request("r1")
        let running = Task { try await f.run(render) }
        try await f.q.waitUntil("submitted") { try await f.reload(render).providerJobID != nil }
        let ticket = try #require(try await f.reload(render).providerJobID)
        // Its running state is kept on the row as it made it, and read back as such.
        let stored = try await f.q.pool.query("SELECT provider_submission::text AS s FROM renders WHERE id = $1", [render.id.value]).rows[0]
        let submission = try JSONDecoder().decode(ProviderSubmission.self, from: Data(try stored.string("s").utf8))
        #expect(submission == ProviderSubmission(provider: TicketTryOnProvider.name, jobID: ticket, state: .running(.object(["ticket": .string(ticket)]))))

        // Its callback, as the dispatcher's webhook route takes it: its source authenticates and names it.
        let sources = registered.flatMap { $0.webhookSources(WebhookSettings(), CurlHTTPClient()) }
        let source = try #require(sources.first { $0.provider == TicketTryOnProvider.source })
        let body = Data(JSONValue.object(["ticket": .string(ticket), "jpeg": .string(RenderFixture.bodyPhoto.base64EncodedString())]).jsonText.utf8)
        let event = try await source.event(headers: [:], body: body)
        #expect(try await f.store.recordProviderEvent(provider: source.provider, requestID: event.key, announce: event.announce, payload: body))
        _ = try await running.value
        let done = try await f.reload(render)
        #expect(done.status == .complete && done.resultPath == "u1/renders/r1.jpg")
        #expect(try await f.credits("u1") == (1, 1, 0))
    }
}
