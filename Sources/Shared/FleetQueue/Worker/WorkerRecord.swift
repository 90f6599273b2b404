import Foundation

public struct WorkerRecord: Sendable, Equatable {
    public let id: String
    public let host: String
    public let pid: Int32
    public let executable: String
    public let kinds: [JobKind]

    public init(id: String, host: String, pid: Int32, executable: String, kinds: [JobKind]) {
        self.id = id
        self.host = host
        self.pid = pid
        self.executable = executable
        self.kinds = kinds
    }
}

public struct LiveWorker: Sendable, Equatable {
    public let record: WorkerRecord
    public let startedAt: Date
    public let lastHeartbeatAt: Date
    /// Jobs it holds a lease on.
    public let running: Int
}

/// A worker the reaper found dead, and the jobs it took back from it (none when it ran none).
public struct LostWorker: Sendable, Equatable {
    public let id: String
    public let jobs: [RescuedJob]
}
