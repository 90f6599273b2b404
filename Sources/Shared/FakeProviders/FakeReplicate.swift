import Foundation
import Hummingbird
import NIOCore
import Synchronization

/// Replicate's predictions API on loopback, for `bria/remove-background`: create (with
/// `Prefer: wait`), get, cancel, and the output file. Answers follow the script.
public final class FakeReplicate: Sendable {
    public static let token = "r8_fake_token"
    public let script: FakeScript
    public let server: FakeServer
    private let log: RequestLog
    private let store: Store

    struct Prediction {
        var status: String
        var pollsLeft: Int
        var output: Data?
        var outputAsArray: Bool
        var error: String?
        /// What polls answer instead of the prediction's JSON.
        var garbledPolls: Garbage? = nil
    }

    struct State {
        var predictions: [String: Prediction] = [:]
        var cancelled: [String] = []
        /// Known once the server listens; answers carry absolute URLs.
        var baseURL = ""
    }

    final class Store: Sendable {
        let state = Mutex(State())

        func answer(_ id: String, _ prediction: Prediction) throws -> Response {
            try .json(status: 201, object: object(id, prediction))
        }

        func object(_ id: String, _ prediction: Prediction) -> [String: Any] {
            let root = state.withLock { $0.baseURL }
            var object: [String: Any] = [
                "id": id, "model": "bria/remove-background", "status": prediction.status,
                "error": prediction.error ?? NSNull(), "logs": "", "input": ["image": "data:…"],
                "urls": ["get": "\(root)/v1/predictions/\(id)", "cancel": "\(root)/v1/predictions/\(id)/cancel"],
            ]
            if prediction.status == "succeeded" {
                let url = "\(root)/files/\(id).png"
                object["output"] = prediction.outputAsArray ? [url] : url
            } else {
                object["output"] = NSNull()
            }
            return object
        }
    }

    public var baseURL: String { server.baseURL }
    public var requests: [ReceivedRequest] { log.all }
    public var cancelledPredictions: [String] { store.state.withLock { $0.cancelled } }

    private init(script: FakeScript, server: FakeServer, log: RequestLog, store: Store) {
        self.script = script
        self.server = server
        self.log = log
        self.store = store
    }

    public static func start(script: FakeScript = FakeScript()) async throws -> FakeReplicate {
        let log = RequestLog()
        let store = Store()
        let router = Router()

        router.post("/v1/models/:owner/:name/predictions") { request, context -> Response in
            let body = Data(buffer: try await request.body.collect(upTo: 64 << 20))
            let model = "\(context.parameters.get("owner") ?? "")/\(context.parameters.get("name") ?? "")"
            log.append(ReceivedRequest(path: "/v1/models/\(model)/predictions", headers: request.headers.dictionary, fields: ["model": model]))
            guard request.headers[.authorization] == "Bearer \(token)" else {
                return .json(status: 401, #"{"title":"Unauthenticated","detail":"You did not pass a valid authentication token","status":401}"#)
            }
            guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
                  let input = object["input"] as? [String: Any], let image = input["image"] as? String,
                  let comma = image.firstIndex(of: ","), image.hasPrefix("data:image/"),
                  let photo = Data(base64Encoded: String(image[image.index(after: comma)...]))
            else {
                return .json(status: 422, #"{"title":"Input validation failed","detail":"- image: Does not match format 'uri'","status":422}"#)
            }
            let id = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(26).description
            var prediction = Prediction(status: "succeeded", pollsLeft: 0, output: nil, outputAsArray: false, error: nil)
            switch script.next() {
            case .succeed:
                prediction.output = try await realCutout(of: photo)
            case .succeedAfter(let delay):
                try await FakeServer.pause(for: delay)
                prediction.output = try await realCutout(of: photo)
            case .succeedWithOutputArray:
                prediction.output = try await realCutout(of: photo)
                prediction.outputAsArray = true
            case .succeedAfterPolls(let polls):
                prediction.output = try await realCutout(of: photo)
                prediction.status = "processing"
                prediction.pollsLeft = polls
            case .fail(let status):
                return .json(status: status, #"{"title":"Error","detail":"fake failure \#(status)","status":\#(status)}"#)
            case .failPrediction:
                prediction.status = "failed"
                prediction.error = "CUDA out of memory"
            case .hang:
                prediction.status = "processing"
                prediction.pollsLeft = .max
            case .notPNG:
                prediction.output = photo  // a JPEG where a PNG is expected
            case .garbledPrediction(let garbage):
                prediction.status = "processing"
                return garbage.response(store.object(id, prediction))
            case .garbledPolls(let garbage):
                prediction.status = "processing"
                prediction.pollsLeft = .max
                prediction.garbledPolls = garbage
            }
            store.state.withLock { $0.predictions[id] = prediction }
            return try store.answer(id, prediction)
        }

        router.get("/v1/predictions/:id") { request, context -> Response in
            let id = context.parameters.get("id") ?? ""
            log.append(ReceivedRequest(path: "/v1/predictions/\(id)", headers: request.headers.dictionary, fields: [:]))
            let prediction = store.state.withLock { state -> Prediction? in
                guard var prediction = state.predictions[id] else { return nil }
                if prediction.status == "processing" {
                    if prediction.pollsLeft != .max { prediction.pollsLeft -= 1 }
                    if prediction.pollsLeft <= 0 { prediction.status = "succeeded" }
                }
                state.predictions[id] = prediction
                return prediction
            }
            guard let prediction else { return .json(status: 404, #"{"detail":"Not found."}"#) }
            if let garbage = prediction.garbledPolls { return garbage.response(store.object(id, prediction)) }
            return try store.answer(id, prediction)
        }

        router.post("/v1/predictions/:id/cancel") { _, context -> Response in
            let id = context.parameters.get("id") ?? ""
            let prediction = store.state.withLock { state -> Prediction? in
                state.cancelled.append(id)
                state.predictions[id]?.status = "canceled"
                return state.predictions[id]
            }
            guard let prediction else { return .json(status: 404, #"{"detail":"Not found."}"#) }
            return try store.answer(id, prediction)
        }

        router.get("/files/:file") { _, context -> Response in
            let id = (context.parameters.get("file") ?? "").replacingOccurrences(of: ".png", with: "")
            guard let output = store.state.withLock({ $0.predictions[id]?.output }) else { return Response(status: .notFound) }
            return Response(status: .ok, headers: [.contentType: "image/png"], body: .init(byteBuffer: ByteBuffer(bytes: output)))
        }

        let server = try await FakeServer.start(router: router)
        store.state.withLock { $0.baseURL = server.baseURL }
        return FakeReplicate(script: script, server: server, log: log, store: store)
    }

    public func stop() async { await server.stop() }
}
