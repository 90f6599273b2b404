import FleetSupport
import Foundation

/// A virtual try-on service: one garment on one person, asynchronous from the caller's side.
///
/// The render lifecycle calls `submit` once (once more after a transient error), then `result`
/// until it is no longer `.pending` (or learns the outcome from a webhook), and `cancel` when the
/// render is abandoned. Errors are `ProviderError`: `isTransient` says whether to try again.
public protocol TryOnProvider: Sendable {
    /// The configuration name (`fal-fashn`, `fal-nano-banana-pro`, `google-vto`).
    var name: String { get }
    /// Categories this provider can render; a request for another is refused before any call.
    var supportedCategories: Set<GarmentCategory> { get }
    /// Hands the try-on to the provider. Throws `.rejected` when the provider refuses the input.
    func submit(_ request: TryOnRequest) async throws(ProviderError) -> ProviderSubmission
    /// Where the job stands. A job that ran and failed is `.failed`, not a thrown error.
    func result(of submission: ProviderSubmission) async throws(ProviderError) -> ProviderResult
    /// Asks the provider to drop the job, where it allows that; best effort, never throws.
    func cancel(_ submission: ProviderSubmission) async
    /// The webhook its callbacks come through: the path segment of `POST /webhooks/{source}`
    /// (`TryOnProviders.webhookSources`) and the `provider_events.provider` they are stored
    /// under. Nil (the default): it calls nobody back, the worker polls.
    var webhookSource: String? { get }
    /// A stored callback's body (`provider_events.payload`, as the webhook source accepted it)
    /// read into the job's outcome. Only asked of a provider with a `webhookSource`.
    func result(ofCallback payload: Data) throws(ProviderError) -> ProviderResult
}

extension TryOnProvider {
    public var webhookSource: String? { nil }

    public func result(ofCallback payload: Data) throws(ProviderError) -> ProviderResult {
        throw ProviderError.malformedResponse(provider: name, reason: "\(name) takes no webhooks")
    }
}

/// One image sent to a provider, as stored (JPEG, or PNG for cutouts).
public struct TryOnImage: Sendable, Equatable {
    public var bytes: Data
    public var mimeType: String

    public init(bytes: Data, mimeType: String = "image/jpeg") {
        self.bytes = bytes
        self.mimeType = mimeType
    }

    /// `data:<mime>;base64,<bytes>`: how fal takes an image without a public URL.
    public var dataURI: String { bytes.dataURI(mimeType: mimeType) }
}

public struct TryOnOptions: Sendable, Equatable {
    /// fal posts the outcome here (sent as `fal_webhook`); synchronous providers ignore it.
    public var webhookURL: String?
    public var seed: Int?
    /// Limit of each HTTP exchange with the provider. Google's predict holds the whole render,
    /// so the caller passes what is left of the render's deadline.
    public var timeout: Duration

    public init(webhookURL: String? = nil, seed: Int? = nil, timeout: Duration = .seconds(30)) {
        self.webhookURL = webhookURL
        self.seed = seed
        self.timeout = timeout
    }
}

public struct TryOnRequest: Sendable, Equatable {
    public var person: TryOnImage
    public var garment: TryOnImage
    public var category: GarmentCategory
    public var options: TryOnOptions

    public init(person: TryOnImage, garment: TryOnImage, category: GarmentCategory, options: TryOnOptions = TryOnOptions()) {
        self.person = person
        self.garment = garment
        self.category = category
        self.options = options
    }
}

/// What `submit` returns: enough to ask for the result later, from any process (it is Codable,
/// so it can be kept in the job payload or the database: `renders.provider_submission`).
public struct ProviderSubmission: Sendable, Codable, Equatable {
    /// Where the job stands after submit. The generic code (the render run, the sweeper) only
    /// tells the two apart: a running job is kept on the render's row, waited for and cancelled
    /// when abandoned; a settled one is the outcome already.
    public enum State: Sendable, Codable, Equatable {
        /// Still at the provider: what that provider needs to poll, fetch and cancel it, in JSON
        /// of its own that only it reads (fal: its queue URLs, `FalTryOnProvider.swift`).
        case running(JSONValue)
        /// Settled during submit (a synchronous provider): `result(of:)` returns it.
        case settled(ProviderResult)
    }

    /// The provider's configuration name (`TryOnProvider.name`): the one that reads `state`.
    public var provider: String
    /// The provider's id for the job (fal's `request_id`); webhooks name it.
    public var jobID: String
    public var state: State

    public init(provider: String, jobID: String, state: State) {
        self.provider = provider
        self.jobID = jobID
        self.state = state
    }
}

/// `running` is encoded as the provider's JSON itself and `settled` as `{"settled":{"_0":…}}`:
/// the shapes Swift gave the earlier enum (`{"falQueue":{"_0":…}}` was fal's running case), so
/// rows stored before the state was opaque decode unchanged. A provider's own JSON is never an
/// object whose only key is `settled`.
extension ProviderSubmission.State {
    private enum Key: String, CodingKey {
        case settled
        case value = "_0"
    }

    public init(from decoder: any Decoder) throws {
        let value = try JSONValue(from: decoder)
        guard case .object(let fields) = value, fields.count == 1, fields["settled"] != nil else {
            self = .running(value)
            return
        }
        let settled = try decoder.container(keyedBy: Key.self).nestedContainer(keyedBy: Key.self, forKey: .settled)
        self = .settled(try settled.decode(ProviderResult.self, forKey: .value))
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .running(let value):
            try value.encode(to: encoder)
        case .settled(let result):
            var container = encoder.container(keyedBy: Key.self)
            var settled = container.nestedContainer(keyedBy: Key.self, forKey: .settled)
            try settled.encode(result, forKey: .value)
        }
    }

    /// Whether the outcome came with the submit (nothing to wait for, keep or cancel).
    public var isSettled: Bool {
        if case .settled = self { true } else { false }
    }
}

public enum ProviderResult: Sendable, Codable, Equatable {
    case pending
    case succeeded(ProviderImage)
    case failed(ProviderFailure)
}

/// The rendered image: inline, or at a URL to download without credentials (`ProviderImageFetcher`).
public enum ProviderImage: Sendable, Codable, Equatable {
    case bytes(Data, mimeType: String)
    case url(String)
}

/// A job the provider ran and gave up on (or a result it would not deliver).
public struct ProviderFailure: Error, Sendable, Codable, Equatable, CustomStringConvertible {
    /// The provider's error type when it gives one (`runner_server_error`, `rai_filtered`…), else `http_<status>`.
    public var code: String
    public var message: String
    /// The provider says the same input may succeed on a new submit (a server-side fault).
    public var retryable: Bool

    public init(code: String, message: String, retryable: Bool) {
        self.code = code
        self.message = message
        self.retryable = retryable
    }

    public var description: String { "\(code): \(message)" }
}
