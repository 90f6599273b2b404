import FleetHTTPClient
import Foundation

/// Replicate running BRIA RMBG-2.0 (`bria/remove-background`). The prediction is created in
/// sync mode (`Prefer: wait`); if it is still running when the wait ends, `urls.get` is
/// polled until the time budget runs out, and then the prediction is cancelled.
public struct ReplicateBackgroundRemover: BackgroundRemover {
    public let name = "replicate"
    public let baseURL: String
    public let model: String
    public let timeout: Duration
    public let pollInterval: Duration
    let token: String
    let http: any HTTPClient

    public init(
        baseURL: String = "https://api.replicate.com", model: String = "bria/remove-background", token: String,
        timeout: Duration, pollInterval: Duration = .milliseconds(500), http: any HTTPClient
    ) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.model = model
        self.token = token
        self.timeout = timeout
        self.pollInterval = pollInterval
        self.http = http
    }

    /// The fields of a prediction this client reads.
    struct Prediction: Decodable {
        let id: String
        let status: String
        let output: Output?
        let error: String?
        let urls: URLs?

        struct URLs: Decodable {
            let get: String?
            let cancel: String?
        }

        /// A single URL or a list of them: the model's schema does not say which.
        enum Output: Decodable {
            case url(String)
            case none

            init(from decoder: any Decoder) throws {
                let container = try decoder.singleValueContainer()
                if let url = try? container.decode(String.self) {
                    self = .url(url)
                } else if let first = try? container.decode([String].self).first {
                    self = .url(first)
                } else {
                    self = .none
                }
            }
        }

        var isTerminal: Bool { ["succeeded", "failed", "canceled", "aborted"].contains(status) }
    }

    public func cutout(of photo: Data) async throws -> Data {
        let deadline = ContinuousClock.now + timeout
        let waitSeconds = max(1, min(60, Int(timeout.seconds)))
        let input = try JSONSerialization.data(withJSONObject: ["input": ["image": photo.dataURI(mimeType: "image/jpeg")]])
        var prediction = try await call(
            .json(.post, url: "\(baseURL)/v1/models/\(model)/predictions", body: input,
                  headers: [("Prefer", "wait=\(waitSeconds)")] + auth, timeout: remaining(until: deadline)))
        do {
            while !prediction.isTerminal {
                guard let poll = prediction.urls?.get, ContinuousClock.now + pollInterval < deadline else {
                    throw BackgroundRemovalError.transient(backend: name, reason: "prediction \(prediction.id) still \(prediction.status) after \(timeout)")
                }
                try await Task.sleep(for: pollInterval)
                prediction = try await call(HTTPClientRequest(url: poll, headers: auth, timeout: remaining(until: deadline)))
            }
        } catch {
            // Out of time (or polls failing): a prediction left running would still be billed.
            await cancel(prediction)
            throw error
        }
        guard prediction.status == "succeeded", case .url(let url)? = prediction.output else {
            throw BackgroundRemovalError.transient(
                backend: name, reason: "prediction \(prediction.id) \(prediction.status): \(prediction.error ?? "no output")")
        }
        let image = try await send(HTTPClientRequest(url: url, timeout: remaining(until: deadline)))
        try BackgroundRemovalError.requirePNG(image.body, backend: name, contentType: image.headers["content-type"])
        return image.body
    }

    private var auth: [(name: String, value: String)] { [("Authorization", "Bearer \(token)")] }

    private func remaining(until deadline: ContinuousClock.Instant) -> Duration {
        max(.milliseconds(1), deadline - ContinuousClock.now)
    }

    private func call(_ request: HTTPClientRequest) async throws -> Prediction {
        let response = try await send(request)
        do {
            return try JSONDecoder().decode(Prediction.self, from: response.body)
        } catch {
            throw BackgroundRemovalError.transient(backend: name, reason: "unreadable prediction: \(error)")
        }
    }

    private func send(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        try await BackgroundRemovalError.send(request, with: http, backend: name)
    }

    /// Best effort.
    private func cancel(_ prediction: Prediction) async {
        let url = prediction.urls?.cancel ?? "\(baseURL)/v1/predictions/\(prediction.id)/cancel"
        _ = try? await http.execute(HTTPClientRequest(method: .post, url: url, headers: auth, timeout: .seconds(5)))
    }
}
