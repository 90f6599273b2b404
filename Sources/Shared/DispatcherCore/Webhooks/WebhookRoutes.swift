import DispatcherProtocol
import FleetHTTP
import FleetHTTPClient
import FleetSupport
import Foundation
import Hummingbird
import Logging
import Metrics
import NIOCore
import Providers
import Renders
import Tracing

/// The dispatcher's provider webhooks, `POST /webhooks/{provider}`: read the body (at most
/// `maxBodyBytes`), authenticate it, store it once and announce it (`RenderStore.recordProviderEvent`).
/// 200 for a new or repeated delivery, 4xx for a request that must not come again, 5xx for
/// one the provider should deliver again. Logs name the provider, status and reason only:
/// never headers (signatures) or bodies. Each refusal counts in
/// `fleet_webhooks_refused_total{provider,status}` (401: a bad or missing signature).
public struct WebhookRoutes: HTTPRoutes {
    let sources: [any WebhookSource]
    let store: RenderStore
    let maxBodyBytes: Int
    let logger: Logger

    public init(sources: [any WebhookSource], store: RenderStore, maxBodyBytes: Int, logger: Logger) {
        self.sources = sources
        self.store = store
        self.maxBodyBytes = maxBodyBytes
        self.logger = logger
    }

    /// The providers' endpoints as `dispatcher run` serves them (`TryOnProviders.webhookSources`);
    /// their keys come through `http`.
    public init(settings: WebhookSettings, http: any HTTPClient, store: RenderStore, logger: Logger) {
        self.init(
            sources: TryOnProviders.webhookSources(settings: settings, http: http),
            store: store, maxBodyBytes: settings.maxBodyBytes, logger: logger)
    }

    public func register(on router: Router<BasicRequestContext>) {
        for source in sources {
            router.post("/webhooks/\(source.provider)") { request, _ in await receive(request, from: source) }
        }
    }

    /// In a `provider webhook` span that continues the render's trace when the URL carries the
    /// `traceparent` the worker put in it at submit (fal: `FalQueueClient.traced`); one that is not
    /// well formed is ignored (the signature covers the body, not the URL: a forged one can only
    /// misfile a span).
    func receive(_ request: Request, from source: any WebhookSource) async -> Response {
        let traceParent = request.uri.queryParameters.get(TracePropagation.header).flatMap { try? TraceParent(String($0)) }
        return await withSpan("provider webhook", context: TracePropagation.context(continuing: traceParent?.rawValue), ofKind: .server) { span in
            span.attributes[TraceAttribute.provider] = source.provider
            let response = await handle(request, from: source)
            span.attributes[TraceAttribute.outcome] = Int(response.status.code)
            return response
        }
    }

    private func handle(_ request: Request, from source: any WebhookSource) async -> Response {
        let body: Data
        do {
            body = Data(buffer: try await request.body.collect(upTo: maxBodyBytes))
        } catch {
            return refuse(source, WebhookRejection(status: 413, reason: "body larger than \(maxBodyBytes) bytes, or not received whole"))
        }
        var headers: [String: String] = [:]
        for field in request.headers { headers[field.name.canonicalName] = field.value }
        let event: ProviderEvent
        do {
            event = try await source.event(headers: headers, body: body)
        } catch {
            return refuse(source, error)
        }
        do {
            let stored = try await store.recordProviderEvent(provider: source.provider, requestID: event.key, announce: event.announce, payload: body)
            logger.debug("webhook received", metadata: ["provider": "\(source.provider)", "event": "\(event.key)", "duplicate": "\(!stored)"])
            return JSONResponse.make(.ok, ["stored": stored])
        } catch {
            logger.error("webhook not stored", metadata: ["provider": "\(source.provider)", "error": "\(error)"])
            return refuse(source, WebhookRejection(status: 503, reason: "the event could not be stored; deliver it again"))
        }
    }

    private func refuse(_ source: any WebhookSource, _ rejection: WebhookRejection) -> Response {
        Counter(label: "fleet_webhooks_refused_total", dimensions: [("provider", source.provider), ("status", "\(rejection.status)")]).increment()
        logger.log(level: rejection.status >= 500 ? .error : .warning, "webhook refused", metadata: [
            "provider": "\(source.provider)", "status": "\(rejection.status)", "reason": "\(rejection.reason)",
        ])
        return JSONResponse.make(HTTPResponse.Status(code: rejection.status), ["error": rejection.reason])
    }
}
