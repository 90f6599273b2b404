import FakeProviders
import FleetHTTPClient
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// The two fal providers against FakeFal over loopback HTTP.
@Suite struct FalProviderTests {
    static func fashn(_ fal: FakeFal, _ http: CurlHTTPClient, key: String? = nil) -> FashnProvider {
        FashnProvider(key: key ?? fal.key, queueURL: fal.baseURL, http: http)
    }

    @Test func fashnSubmitsPollsAndTheImageIsDownloaded() async throws {
        try await withFakeFal { fal, http in
            let provider = Self.fashn(fal, http)
            let webhook = "https://fleet.example/hooks/fal?render=r1&token=s3cret"
            let submission = try await provider.submit(Samples.request(.dresses, webhook: webhook))
            #expect(submission.provider == "fal-fashn")
            let result = try await settle(provider, submission)
            let image = try #require(result.image)
            let fetched = try await ProviderImageFetcher(http: http).fetch(image, provider: provider.name)
            #expect(fetched.bytes == FakeImages.jpeg)
            #expect(fetched.mimeType == "image/jpeg")

            let submit = try #require(fal.requests.first)
            #expect(submit.method == "POST" && submit.path == "/fal-ai/fashn/tryon/v1.6")
            #expect(submit.headers["authorization"] == "Key \(fal.key)")
            #expect(submit.query["fal_webhook"] == webhook)
            let input = try #require(submit.json)
            #expect(input["category"] as? String == "one-pieces")
            #expect(input["model_image"] as? String == Samples.person.dataURI)
            #expect(input["garment_image"] as? String == Samples.garment.dataURI)
            #expect(input["output_format"] as? String == "jpeg")
            // Polls go to the URLs fal returned.
            #expect(fal.requests.dropFirst().allSatisfy { $0.path.hasPrefix("/fal-ai/fashn/tryon/requests/\(submission.jobID)") })
        }
    }

    @Test func nanoBananaSubmitsToEditAndPollsWithoutTheSubpath() async throws {
        try await withFakeFal { fal, http in
            let provider = NanoBananaProProvider(key: fal.key, queueURL: fal.baseURL, http: http)
            let submission = try await provider.submit(Samples.request(.shoes))
            let result = try await settle(provider, submission)
            #expect(result.image != nil)
            let requests = fal.requests
            #expect(requests.first?.path == "/fal-ai/nano-banana-pro/edit")
            let input = try #require(requests.first?.json)
            #expect(input["image_urls"] as? [String] == [Samples.person.dataURI, Samples.garment.dataURI])
            #expect((input["prompt"] as? String)?.contains("shoes") == true)
            #expect(requests.dropFirst().map(\.path).allSatisfy { $0.hasPrefix("/fal-ai/nano-banana-pro/requests/") })
            #expect(requests.contains { $0.path.hasSuffix("/status") })
        }
    }

    @Test func aServerErrorIsTransientAndTheRetrySucceeds() async throws {
        try await withFakeFal { fal, http in
            fal.update { $0.transientSubmitFailures = 1 }
            let provider = Self.fashn(fal, http)
            let error = await #expect(throws: ProviderError.self) { try await provider.submit(Samples.request()) }
            #expect(error?.isTransient == true)
            #expect(error?.description.contains("HTTP 503") == true)
            #expect(error?.description.contains("Runner disconnected") == true)
            _ = try await provider.submit(Samples.request())
        }
    }

    @Test func aValidationErrorIsRejectedWithTheDetailMessage() async throws {
        try await withFakeFal { fal, http in
            fal.update { $0.rejection = .init(field: "model_image", message: "No person detected in the image") }
            let error = await #expect(throws: ProviderError.self) { try await Self.fashn(fal, http).submit(Samples.request()) }
            #expect(error == .rejected(provider: "fal-fashn", status: 422, message: "body.model_image: No person detected in the image"))
            #expect(error?.isTransient == false)
        }
    }

    @Test func malformedAnswersAreClearErrors() async throws {
        try await withFakeFal { fal, http in
            let provider = Self.fashn(fal, http)
            fal.update { $0.malformed = [.submit: .htmlPage] }
            let submitError = await #expect(throws: ProviderError.self) { try await provider.submit(Samples.request()) }
            guard case .malformedResponse(_, let reason) = submitError else { Issue.record("got \(String(describing: submitError))"); return }
            #expect(reason.contains("submit response is not the documented JSON (not JSON)") && reason.contains("502 Bad Gateway"))

            fal.update { $0.malformed = [.result: .wrongTypes]; $0.latency = .zero }
            let submission = try await provider.submit(Samples.request())
            let resultError = await #expect(throws: ProviderError.self) { try await provider.result(of: submission) }
            guard case .malformedResponse(_, let reason) = resultError else { Issue.record("got \(String(describing: resultError))"); return }
            #expect(reason.contains("model output") && reason.contains("images"))
        }
    }

    @Test func aJobThatFailsAtFalIsAFailedResult() async throws {
        try await withFakeFal { fal, http in
            fal.update {
                $0.latency = .zero
                $0.jobFailure = .init(status: 500, errorType: "runner_server_error", detail: "CUDA out of memory", retryable: true)
            }
            let provider = Self.fashn(fal, http)
            let result = try await settle(provider, try await provider.submit(Samples.request()))
            #expect(result == .failed(ProviderFailure(code: "runner_server_error", message: "CUDA out of memory", retryable: true)))

            fal.update { $0.jobFailure = .init(status: 422, errorType: "content_policy_violation", detail: "Content flagged", retryable: false) }
            let rejected = try await settle(provider, try await provider.submit(Samples.request()))
            #expect(rejected.failure?.retryable == false)
        }
    }

    @Test func cancelIsSentToTheReturnedURL() async throws {
        try await withFakeFal { fal, http in
            fal.update { $0.neverFinish = true }
            let provider = Self.fashn(fal, http)
            let submission = try await provider.submit(Samples.request())
            #expect(try await provider.result(of: submission) == .pending)
            await provider.cancel(submission)
            #expect(fal.cancelledRequestIDs == [submission.jobID])
            let cancel = try #require(fal.requests.last)
            #expect(cancel.method == "PUT" && cancel.path == "/fal-ai/fashn/tryon/requests/\(submission.jobID)/cancel")
            #expect(try await provider.result(of: submission).failure?.code == "client_cancelled")
        }
    }

    @Test func anUnsupportedCategoryIsRefusedBeforeAnyCall() async throws {
        try await withFakeFal { fal, http in
            let error = await #expect(throws: ProviderError.self) { try await Self.fashn(fal, http).submit(Samples.request(.shoes)) }
            #expect(error == .unsupportedCategory(provider: "fal-fashn", .shoes))
            #expect(fal.requests.isEmpty)
        }
    }

    @Test func aWrongKeyIsUnauthorizedAndNeverRepeated() async throws {
        try await withFakeFal { fal, http in
            let key = "wrong-key-0123456789"
            let error = await #expect(throws: ProviderError.self) { try await Self.fashn(fal, http, key: key).submit(Samples.request()) }
            guard case .unauthorized = error else { Issue.record("got \(String(describing: error))"); return }
            #expect(error?.description.contains(key) == false)
        }
    }

    @Test func aDroppedConnectionIsTransientAndNamesNoSecret() async throws {
        let http = CurlHTTPClient()
        let fal = try await FakeFal.start()
        let base = fal.baseURL
        await fal.stop()
        let provider = FashnProvider(key: "k-secret", queueURL: base, http: http)
        let error = await #expect(throws: ProviderError.self) {
            try await provider.submit(Samples.request(webhook: "https://fleet.example/hook?token=s3cret"))
        }
        #expect(error?.isTransient == true)
        #expect(error?.description.contains("s3cret") == false && error?.description.contains("k-secret") == false)
    }

    @Test func urlsOutsideTheQueueHostAreRefused() async throws {
        // A submit answer pointing the keyed polls at another host would leak the key there.
        let client = FalQueueClient(provider: "fal-fashn", key: "k", baseURL: "https://queue.fal.run", http: StubHTTP(body: """
            {"request_id":"r1","status_url":"https://evil.example/s","response_url":"https://queue.fal.run/a/b/requests/r1","cancel_url":"https://queue.fal.run/a/b/requests/r1/cancel"}
            """))
        let error = await #expect(throws: ProviderError.self) { try await client.submit(endpoint: "a/b", input: Data("{}".utf8), webhookURL: nil, timeout: .seconds(1)) }
        guard case .malformedResponse = error else { Issue.record("got \(String(describing: error))"); return }
    }

    @Test func errorBodiesInEveryDocumentedShape() throws {
        let validation = try #require(FalErrorBody.parse(Data(#"{"detail":[{"loc":["body","image_urls",1],"msg":"bad url","type":"url_parsing"}]}"#.utf8)))
        #expect(validation.message == "body.image_urls.1: bad url" && validation.code == "url_parsing")
        let infrastructure = try #require(FalErrorBody.parse(Data(#"{"detail":"Request timed out","error_type":"request_timeout"}"#.utf8)))
        #expect(infrastructure.message == "Request timed out" && infrastructure.code == "request_timeout")
        #expect(FalErrorBody.parse(Data(#"{"message":"Out of credits"}"#.utf8))?.message == "Out of credits")
        #expect(FalErrorBody.parse(Data("<html>".utf8)) == nil)
    }

    @Test func webhookPayloadsBecomeResults() throws {
        let ok = try FalWebhookPayload.decode(Data("""
            {"error":null,"gateway_request_id":"g1","request_id":"r1","status":"OK",
             "payload":{"images":[{"url":"https://v3.fal.media/files/x.jpg","content_type":"image/jpeg","width":864,"height":1296}],"seed":7}}
            """.utf8))
        #expect(ok.requestID == "r1" && ok.gatewayRequestID == "g1")
        #expect(try ok.tryOnResult(provider: "fal-fashn") == .succeeded(.url("https://v3.fal.media/files/x.jpg")))

        let error = try FalWebhookPayload.decode(Data("""
            {"request_id":"r2","status":"ERROR","error":"Invalid status code: 422",
             "payload":{"detail":[{"loc":["body","prompt"],"msg":"field required","type":"value_error.missing"}]}}
            """.utf8))
        #expect(try error.tryOnResult(provider: "fal-nano-banana-pro")
            == .failed(ProviderFailure(code: "value_error.missing", message: "body.prompt: field required", retryable: false)))

        let unserialisable = try FalWebhookPayload.decode(Data(#"{"request_id":"r3","status":"OK","payload":null,"payload_error":"Output too large"}"#.utf8))
        #expect(try unserialisable.tryOnResult(provider: "fal-fashn").failure?.message == "Output too large")

        let infrastructure = try FalWebhookPayload.decode(Data(#"{"request_id":"r4","status":"ERROR","error":"Invalid status code: 503","payload":{"detail":"Runner disconnected","error_type":"runner_disconnected"}}"#.utf8))
        #expect(try infrastructure.tryOnResult(provider: "fal-fashn").failure?.retryable == true)

        #expect(throws: ProviderError.self) { try FalWebhookPayload.decode(Data(#"{"status":"OK"}"#.utf8)) }
    }

    @Test func submissionsSurviveAJSONRoundTrip() throws {
        let submission = ProviderSubmission(provider: "fal-fashn", jobID: "r1", state: .falQueue(FalQueueURLs(status: "s", response: "r", cancel: "c")))
        let decoded = try JSONDecoder().decode(ProviderSubmission.self, from: JSONEncoder().encode(submission))
        #expect(decoded == submission)
    }
}

/// Answers every request with one fixed 200 body.
struct StubHTTP: HTTPClient {
    var body: String
    func execute(_ request: HTTPClientRequest) async throws -> HTTPClientResponse {
        HTTPClientResponse(status: 200, headers: ["content-type": "application/json"], body: Data(body.utf8))
    }
}
