import FleetQueue
import FleetStorage
import FleetSupport
import Foundation

/// `account.purge`: deletes every file of one user (body photos, uploads, garments, cutouts,
/// renders). Purging a user with no files is a success, so a retried purge is harmless.
public struct PurgeHandler: JobHandler {
    public let kind = JobKind.accountPurge
    let storage: any ImageStorage

    public init(storage: any ImageStorage) {
        self.storage = storage
    }

    public func run(_ job: ClaimedJob, context: JobContext) async throws -> JSONValue? {
        let payload = try job.decodePayload(PurgeAccountPayload.self)
        let deleted = try await storage.deleteAll(of: payload.userID)
        context.logger.info("purged user files", metadata: ["user_id": "\(payload.userID)", "files": "\(deleted)"])
        return .object(["filesDeleted": .number(Double(deleted))])
    }
}
