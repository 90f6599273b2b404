import FleetStorage
import Foundation
import Providers

public enum RenderStatus: String, Codable, Sendable {
    case pending, processing, complete, failed

    public var isTerminal: Bool { self == .complete || self == .failed }
}

/// One row of `renders`, as the status operations and the worker read it. The ids that name its
/// files are checked once, as the row is read (`StorageID`), and travel typed from there.
public struct RenderRecord: Sendable, Codable, Equatable {
    public let id: StorageID
    public let userID: String?
    public let ephemeralTokenID: String?
    public let ownerID: StorageID
    public let garmentID: StorageID
    public let bodyPhotoID: StorageID
    public let category: GarmentCategory
    public let provider: String
    public let status: RenderStatus
    public let jobID: Int64?
    public let providerJobID: String?
    public let resultPath: String?
    public let errorCode: String?
    /// Why it failed (`RenderFailureCode`'s raw value); nil unless failed (and for renders failed
    /// before the fleet recorded reasons).
    public var failureCode: String? = nil
    /// The failure for people: no secret, at most `RenderFailure.maxMessageLength` characters.
    public var errorMessage: String? = nil
    public let charged: Bool
    /// Whether the garment image sent to the provider was its cut-out (false: its normalised
    /// photo); nil until the render has read its inputs.
    public var garmentCutout: Bool? = nil
    public let deadlineAt: Date
    public let feedback: String?
    /// How many times an operator retried it (`RenderRetries`).
    public var retries = 0
    public let createdAt: Date
    public let updatedAt: Date

    /// The failure it ended with, when failed; a render failed before the fleet recorded reasons
    /// reads as a technical one of its business code.
    public var failure: RenderFailure? {
        guard status == .failed else { return nil }
        let code = failureCode.flatMap(RenderFailureCode.init(rawValue:)) ?? (errorCode == RenderErrorCode.renderTimeout.rawValue ? .timeout : .internalError)
        return RenderFailure(code, errorMessage ?? errorCode ?? "failed")
    }

    /// The protocol's JSON names.
    enum CodingKeys: String, CodingKey {
        case id, userID = "userId", ephemeralTokenID = "ephemeralTokenId", ownerID = "ownerId", garmentID = "garmentId"
        case bodyPhotoID = "bodyPhotoId", category, provider, status, jobID = "jobId", providerJobID = "providerJobId"
        case resultPath, errorCode, failureCode, errorMessage, charged, garmentCutout, deadlineAt, feedback, createdAt, updatedAt
    }
}
