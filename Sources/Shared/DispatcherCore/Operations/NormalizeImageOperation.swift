import FleetCallbacks
import DispatcherProtocol
import FleetQueue
import Imaging
import Logging

/// `image.normalize`: an upload normalised into a body photo or a garment photo by the image worker.
public struct NormalizeImageOperation: DispatcherOperation {
    public var access: OperationAccess { .submitters }
    let submitter: JobSubmitter
    let profiles: any NormalizeProfileSource
    let logger: Logger

    public init(enqueuer: any JobEnqueuer, profiles: any NormalizeProfileSource, outbound: OutboundSettings = .off, logger: Logger) {
        submitter = JobSubmitter(enqueuer: enqueuer, outbound: outbound)
        self.profiles = profiles
        self.logger = logger
    }

    public func run(_ request: NormalizeImageRequest) async throws -> EnqueuedJobResult {
        let payload = NormalizeImagePayload(
            userID: try storageID(request.userId, field: "userId"), uploadID: try storageID(request.uploadId, field: "uploadId"),
            target: request.target == .body ? .body : .garment, imageID: try storageID(request.imageId, field: "imageId"),
            profile: try await checkedProfile(request.profile))
        return try await submitter.submit(kind: .imageNormalize, payload: payload, options: request.options)
    }

    /// An unknown profile is refused here, naming the known ones, rather than queued to die in
    /// the worker. When the settings cannot be read the job goes ahead: the worker, which reads
    /// them again, has the last word (`IMAGE_PROFILE_UNKNOWN`).
    private func checkedProfile(_ name: String?) async throws -> String? {
        guard let name else { return nil }
        guard NormalizeProfiles.isValidName(name) else { throw DispatcherError(.badArgument, "args.profile must be 1 to 32 characters of a-z 0-9 -") }
        let known: NormalizeProfiles
        do {
            known = try await profiles.profiles()
        } catch {
            logger.warning("image profiles unreadable, profile left to the worker", metadata: ["profile": "\(name)", "error": "\(error)"])
            return name
        }
        guard known.byName[name] != nil else {
            throw DispatcherError(.badArgument, "args.profile: \(NormalizeProfileError.unknown(name, known: known.names))")
        }
        return name
    }
}
