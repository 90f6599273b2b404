import DispatcherProtocol
import FleetQueue
import FleetSupport
import Renders

// The queue's and the renders' records as the protocol shows them. The wire types know no
// domain (a backend links the client without libpq or libvips), so the dispatcher translates.

extension JobStatus {
    init(_ record: JobRecord) {
        self.init(
            id: record.id, kind: record.kind.rawValue, queue: record.queue, state: State(record.state), priority: record.priority,
            attempt: record.attempt, maxAttempts: record.maxAttempts,
            // jsonb text from the table: valid JSON by construction.
            payload: (try? JSONValue(json: record.payload)) ?? .null, result: record.result.flatMap { try? JSONValue(json: $0) },
            errors: record.errors.map { AttemptError(attempt: $0.attempt, at: $0.at, error: $0.error, code: $0.code, worker: $0.worker) },
            idempotencyKey: record.idempotencyKey, workerId: record.leaseOwner, cancelRequested: record.cancelRequested,
            createdAt: record.createdAt, runAt: record.runAt, startedAt: record.startedAt, finishedAt: record.finishedAt,
            after: record.dependsOn, waitingOn: record.waitingOn)
    }
}

extension JobStatus.State {
    init(_ state: JobState) {
        switch state {
        case .waiting: self = .waiting
        case .available: self = .available
        case .running: self = .running
        case .completed: self = .completed
        case .dead: self = .dead
        case .cancelled: self = .cancelled
        }
    }
}

extension QueueStats.Kind {
    init(_ stats: KindStats, paused: Bool) {
        self.init(
            kind: stats.kind.rawValue, due: stats.due, scheduled: stats.scheduled, running: stats.running, retrying: stats.retrying,
            completed: stats.completed, dead: stats.dead, cancelled: stats.cancelled, oldestDueSeconds: stats.oldestDueAge?.seconds,
            paused: paused, waiting: stats.waiting, dependencyFailed: stats.dependencyFailed)
    }
}

extension QueueStats.Worker {
    init(_ worker: LiveWorker, pausedKinds: Set<String>) {
        self.init(
            id: worker.record.id, host: worker.record.host, pid: Int(worker.record.pid), executable: worker.record.executable,
            kinds: worker.record.kinds.map(\.rawValue), startedAt: worker.startedAt, lastHeartbeatAt: worker.lastHeartbeatAt,
            running: worker.running, pausedKinds: worker.record.kinds.map(\.rawValue).filter(pausedKinds.contains))
    }
}

extension QueueStats.Pause {
    init(_ pause: QueuePause) {
        self.init(scope: pause.target.scope == .kind ? .kind : .queue, name: pause.target.name,
                  pausedBy: pause.pausedBy, pausedAt: pause.pausedAt)
    }
}

extension JobSummaryView {
    init(_ job: JobSummary) {
        self.init(
            id: job.id, kind: job.kind.rawValue, queue: job.queue, state: JobStatus.State(job.state), priority: job.priority,
            attempt: job.attempt, maxAttempts: job.maxAttempts,
            lastError: job.lastError.map { JobStatus.AttemptError(attempt: $0.attempt, at: $0.at, error: $0.error, code: $0.code, worker: $0.worker) },
            workerId: job.workerID, createdAt: job.createdAt, runAt: job.runAt, startedAt: job.startedAt, finishedAt: job.finishedAt)
    }
}

extension JobFilter {
    init(_ arguments: JobFilterArguments?) {
        self.init(
            states: arguments?.states?.map(JobState.init), kinds: arguments?.kinds?.map(JobKind.init(rawValue:)),
            queues: arguments?.queues, errorCode: arguments?.errorCode,
            createdAfter: arguments?.createdAfter, createdBefore: arguments?.createdBefore,
            finishedAfter: arguments?.finishedAfter, finishedBefore: arguments?.finishedBefore)
    }
}

extension JobState {
    /// The two enums share their raw values: `JobStatus.State.init(_:)` above maps every queue
    /// state by name, so a state added to the queue fails to compile there first.
    init(_ state: JobStatus.State) {
        self.init(rawValue: state.rawValue)!
    }
}

extension RenderView {
    init(_ record: RenderRecord, resultUrl: String? = nil) {
        self.init(
            id: record.id.value, userId: record.userID, garmentId: record.garmentID.value, bodyPhotoId: record.bodyPhotoID.value,
            category: record.category.rawValue, provider: record.provider, status: Status(record.status), jobId: record.jobID,
            resultPath: record.resultPath, errorCode: record.errorCode, failureCode: record.failureCode, errorMessage: record.errorMessage,
            charged: record.charged, garmentCutout: record.garmentCutout,
            feedback: record.feedback,
            deadlineAt: record.deadlineAt, createdAt: record.createdAt, updatedAt: record.updatedAt, resultUrl: resultUrl)
    }
}

extension RenderView.Status {
    init(_ status: RenderStatus) {
        switch status {
        case .pending: self = .pending
        case .processing: self = .processing
        case .complete: self = .complete
        case .failed: self = .failed
        }
    }
}
