import Foundation
import Imaging
import Synchronization

/// What a fake backend does with the next request.
public enum FakeBehaviour: Sendable, Equatable {
    /// Answers with a real cut-out (computed with libvips).
    case succeed
    /// Answers with a real cut-out once this long has passed (a slow model), on the one request.
    case succeedAfter(Duration)
    /// Replicate: the created prediction is still `processing` for this many polls.
    case succeedAfterPolls(Int)
    /// Replicate: `output` is a one-element array instead of a string.
    case succeedWithOutputArray
    /// Answers with this status and an error body in the provider's shape.
    case fail(status: Int)
    /// Replicate: the prediction ends `failed` with an error message.
    case failPrediction
    /// Never answers (until the server stops): the client's timeout must fire.
    case hang
    /// Answers 200 with bytes that are not a PNG.
    case notPNG
    /// Replicate: the created prediction is answered with garbage instead of its JSON.
    case garbledPrediction(Garbage)
    /// Replicate: the prediction is created `processing`, and every poll is answered with garbage.
    case garbledPolls(Garbage)
}

/// Behaviours queued by a test, taken one per request; `.succeed` once they run out.
public final class FakeScript: Sendable {
    private let queued: Mutex<[FakeBehaviour]>

    public init(_ behaviours: [FakeBehaviour] = []) { queued = Mutex(behaviours) }

    public func next() -> FakeBehaviour {
        queued.withLock { $0.isEmpty ? .succeed : $0.removeFirst() }
    }

    public func append(_ behaviours: FakeBehaviour...) {
        queued.withLock { $0.append(contentsOf: behaviours) }
    }
}

/// What a fake received, for the test's assertions.
public struct ReceivedRequest: Sendable {
    public let path: String
    public let headers: [String: String]
    public let fields: [String: String]
}

final class RequestLog: Sendable {
    private let entries = Mutex<[ReceivedRequest]>([])
    func append(_ request: ReceivedRequest) { entries.withLock { $0.append(request) } }
    var all: [ReceivedRequest] { entries.withLock { $0 } }
}

/// A real cut-out of `photo`, as the models would answer: RGBA PNG at the photo's size.
func realCutout(of photo: Data) async throws -> Data {
    try await LocalBackgroundRemover().cutout(of: photo)
}
