import Foundation

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
        switch submission.state {
        case .falQueue(let urls): return try await fal.tryOnResult(urls)
        case .settled(let result): return result
        }
    }

    public func cancel(_ submission: ProviderSubmission) async {
        guard case .falQueue(let urls) = submission.state else { return }
        _ = await fal.cancel(urls)
    }
}
