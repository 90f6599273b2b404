import FleetQueue
import FleetStorage
import FleetSupport
import Foundation

/// The rows that say which storage trees an account owns, behind a seam: the module that owns
/// them (Renders: renders and onboarding tokens) decides, the purge deletes the files.
public protocol AccountRecords: Sendable {
    /// Erases `user`'s rows that name its photos and calls `deleteTrees` with every storage tree
    /// the user owns; the rows that find those trees are forgotten only after it returns, so an
    /// attempt killed half way leaves its retry the same trees. Answers `deleteTrees`' answer.
    func erase(_ user: StorageID, deletingTrees deleteTrees: @Sendable ([StorageID]) async throws -> Int) async throws -> Int
}

/// `account.purge`: deletes every file of one user (body photos, uploads, garments, cutouts,
/// renders) in every tree the user owns: its own and those of the onboarding tokens linked to
/// it, and the rows naming them (`AccountRecords`). Purging a user with no files is a success,
/// so a retried purge is harmless.
public struct PurgeHandler: JobHandler {
    public let kind = JobKind.accountPurge
    let storage: any ImageStorage
    let accounts: any AccountRecords

    public init(storage: any ImageStorage, accounts: any AccountRecords) {
        self.storage = storage
        self.accounts = accounts
    }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(PurgeAccountPayload.self)
        let storage = storage
        let deleted = try await accounts.erase(payload.userID) { trees in
            var deleted = 0
            for tree in trees { deleted += try await storage.deleteAll(of: tree) }
            return deleted
        }
        context.logger.info("purged user files", metadata: ["user_id": "\(payload.userID)", "files": "\(deleted)"])
        return .object(["filesDeleted": .number(Double(deleted))])
    }
}

extension JobMatch {
    /// The image jobs that write into `tree`: its normalisations and cut-outs.
    public static func imageJobs(writingInto tree: StorageID) throws -> [JobMatch] {
        struct Fields: Encodable { let userId: StorageID }
        return try [NormalizeImagePayload.kind, GarmentCutoutPayload.kind].map { try JobMatch(kind: $0, payloadContains: Fields(userId: tree)) }
    }
}
