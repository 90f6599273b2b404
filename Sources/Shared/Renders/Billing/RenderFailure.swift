import FleetSupport
import Foundation
import Providers

/// Why a render failed: the fleet's one list of failure reasons (`renders.failure_code`, the wire's
/// `failureCode`, the failed `render.run` job's error code). The product's business code
/// (`RENDER_FAILED` / `RENDER_TIMEOUT`) says that it failed; this says why, for operators, for the
/// metrics, and for what the failure costs: credits, onboarding tokens and operator retries read
/// `isTechnical` and nothing else.
public enum RenderFailureCode: String, Codable, Sendable, CaseIterable {
    /// The provider answered 5xx, dropped the connection, could not be reached, or answered
    /// something its API does not document.
    case providerDown = "PROVIDER_DOWN"
    /// The provider kept answering 429 until the render's deadline passed (`RENDER_TIMEOUT`).
    case providerRateLimited = "PROVIDER_RATE_LIMITED"
    /// The fleet's side of the provider is wrong: no key, credentials refused, an endpoint or a
    /// category the provider does not have.
    case providerMisconfigured = "PROVIDER_MISCONFIGURED"
    /// The render did not finish within its deadline.
    case timeout = "TIMEOUT"
    /// An input or the result could not be read or written in the fleet's storage.
    case storage = "STORAGE"
    /// A photo the render needed could not be made for a technical reason (its normalisation or
    /// cut-out job failed for good, not on the photo's account).
    case inputFailed = "INPUT_FAILED"
    /// An operator cancelled the render's job before it ran.
    case cancelled = "CANCELLED"
    /// The fleet could not run the render's job (its attempts ended on database or worker errors).
    case internalError = "INTERNAL"
    /// The provider refused this input (a 422, a content filter): the same photos fail the same way.
    case providerRejected = "PROVIDER_REJECTED"
    /// The person's photo is not a usable image (not an image, too large, an unsupported format).
    case imageInvalid = "IMAGE_INVALID"

    /// True when the failure is the fleet's or its provider's, not the photos': it consumes nothing
    /// (no credit, not an onboarding token's free render) and an operator may run it again.
    public var isTechnical: Bool {
        switch self {
        case .providerDown, .providerRateLimited, .providerMisconfigured, .timeout, .storage, .inputFailed, .cancelled, .internalError: true
        case .providerRejected, .imageInvalid: false
        }
    }

    /// The business code the render ends with: its deadline passed, or it failed.
    public var errorCode: RenderErrorCode {
        switch self {
        case .timeout, .providerRateLimited: .renderTimeout
        default: .renderFailed
        }
    }
}

/// A failed render's code and its message for people: one line, at most `maxMessageLength`
/// characters, with anything shaped like a credential replaced (`SecretRedaction`), since it is
/// stored, listed and shown on the console.
public struct RenderFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The bound of `renders.error_message` (migration 23 checks it too).
    public static let maxMessageLength = 500

    public let code: RenderFailureCode
    public let message: String

    public init(_ code: RenderFailureCode, _ message: String) {
        self.code = code
        let line = SecretRedaction.redact(message).split(whereSeparator: \.isNewline).joined(separator: " ")
            .trimmingCharacters(in: .whitespaces)
        self.message = line.count > Self.maxMessageLength ? String(line.prefix(Self.maxMessageLength - 1)) + "…" : line
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
