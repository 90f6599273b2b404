import FleetSupport
import Foundation
import Metrics

/// A try-on model behind fal's queue. Only the endpoint and the input JSON differ between fal
/// models; submit, result and cancel are shared here.
public protocol FalTryOnProvider: TryOnProvider {
    associatedtype Input: Encodable
    /// `owner/alias`, plus the subpath on submit (`fal-ai/nano-banana-pro/edit`).
    var endpoint: String { get }
    var fal: FalQueueClient { get }
    func input(for request: TryOnRequest) -> Input
}

extension FalTryOnProvider {
    public func submit(_ request: TryOnRequest) async throws(ProviderError) -> ProviderSubmission {
        guard supportedCategories.contains(request.category) else {
            throw ProviderError.unsupportedCategory(provider: name, request.category)
        }
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = .withoutEscapingSlashes
        let body: Data
        do { body = try encoder.encode(input(for: request)) } catch {
            throw ProviderError.failed(provider: name, reason: "could not encode the model input: \(error)")
        }
        let (requestID, urls) = try await fal.submit(
            endpoint: endpoint, input: body, webhookURL: request.options.webhookURL, timeout: request.options.timeout)
        return ProviderSubmission(provider: name, jobID: requestID, state: .falQueue(urls))
    }

    public func result(of submission: ProviderSubmission) async throws(ProviderError) -> ProviderResult {
        if case .settled(let result) = submission.state { return result }
        guard let urls = submission.state.falQueueURLs else {
            throw ProviderError.malformedResponse(provider: name, reason: "submission \(submission.jobID) is not a fal one")
        }
        return try await fal.tryOnResult(urls)
    }

    public func cancel(_ submission: ProviderSubmission) async {
        guard let urls = submission.state.falQueueURLs else { return }
        let outcome = switch await fal.cancel(urls) {
        case .requested: "requested"
        case .alreadyCompleted: "already_completed"
        case .notSent: "not_sent"
        }
        Counter(label: "fleet_provider_cancels_total", dimensions: [("provider", name), ("outcome", outcome)]).increment()
    }

    /// fal posts the outcome to `POST /webhooks/fal` (`FalWebhookSource`).
    public var webhookSource: String? { FalWebhookSource.name }

    public func result(ofCallback payload: Data) throws(ProviderError) -> ProviderResult {
        try FalWebhookPayload.decode(payload).tryOnResult(provider: name)
    }
}

/// fal's running state: its queue URLs, as `{"falQueue":{"_0":{"status":…,"response":…,"cancel":…}}}`,
/// the shape of the rows stored before the state was opaque.
extension ProviderSubmission.State {
    public static func falQueue(_ urls: FalQueueURLs) -> Self {
        .running(.object(["falQueue": .object(["_0": .object([
            "status": .string(urls.status), "response": .string(urls.response), "cancel": .string(urls.cancel),
        ])])]))
    }

    /// The queue URLs of a fal submission; nil for any other state.
    public var falQueueURLs: FalQueueURLs? {
        guard case .running(let value) = self, case .string(let status)? = value["falQueue"]?["_0"]?["status"],
              case .string(let response)? = value["falQueue"]?["_0"]?["response"],
              case .string(let cancel)? = value["falQueue"]?["_0"]?["cancel"]
        else { return nil }
        return FalQueueURLs(status: status, response: response, cancel: cancel)
    }
}
