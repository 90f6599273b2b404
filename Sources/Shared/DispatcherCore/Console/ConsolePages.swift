import DispatcherProtocol
import FleetPostgres
import FleetQueue
import FleetSupport
import Foundation
import Hummingbird
import Renders

/// Each page's values for its template. Values go to the templates as they are: the templates
/// escape them (`ConsoleTemplates`). Only `read` and `operate` tokens open sessions, so every
/// page may be read by every session; what changes anything is checked against the op's roles.
struct ConsolePages: Sendable {
    let fleet: ConsoleFleet
    typealias Session = ConsoleRoutes.Session

    // MARK: Overview

    func overview(_ session: Session) async throws -> ConsolePage {
        let live = try await overviewLive(session)
        return ConsolePage(title: "Overview", body: ConsoleTemplates.render("overview", ["live": live]))
    }

    /// The overview's live part, refreshed every 2 s: one statement for the counts and the
    /// chart (`ConsoleFleet.overview`), and the live workers as `stats` reads them.
    func overviewLive(_ session: Session) async throws -> String {
        async let overview = fleet.overview()
        async let workers = fleet.readQueue.liveWorkers(heartbeatWithin: fleet.liveWorkerWithin)
        async let lag = fleet.replicaLag()
        async let horizon = fleet.snapshotHorizon()
        let numbers = try await overview
        let chart = ThroughputChart(minutes: numbers.minutes)
        return ConsoleTemplates.render("overview-live", [
            "serverTime": Show.date(Date()),
            "replica": try await lag.map { lag in
                [["lag": lag.isReplica ? lag.seconds.map(Show.seconds) ?? "unknown" : "none: the read database is not in recovery (promoted?)"]]
            } ?? [],
            "horizon": Self.horizonLine(try await horizon),
            "kinds": numbers.kinds.map { kind in
                [
                    "kind": kind.kind, "due": kind.due, "running": kind.running, "retrying": kind.retrying, "scheduled": kind.scheduled,
                    "waiting": kind.waiting,
                    "dead": kind.dead, "completed": kind.completed, "lag": kind.lagSeconds.map(Show.seconds) ?? "–", "paused": kind.paused,
                ] as [String: Any]
            },
            "chart": chart.svg, "chartMax": chart.maximum,
            "workers": try await workers.map { worker in
                ["id": worker.record.id, "kinds": worker.record.kinds.map(\.rawValue).joined(separator: ", "), "running": worker.running,
                 "heartbeat": Show.ago(worker.lastHeartbeatAt)] as [String: Any]
            },
        ])
    }

    /// The overview's line on the oldest snapshot: who holds the database's horizon, for how
    /// long (docs/operations.md, "A snapshot held open").
    static func horizonLine(_ horizon: SnapshotHorizon) -> String {
        var line = "Oldest snapshot: "
        if let seconds = horizon.oldestSeconds, let holder = horizon.holder {
            line += "\(Show.seconds(seconds)), \(horizon.oldestXids ?? 0) transactions, held by \(holder)"
        } else {
            line += "none open"
        }
        if let feedback = horizon.replicaFeedbackXids { line += " · a replica holds the horizon \(feedback) transactions back" }
        return line
    }

    // MARK: Jobs

    func jobs(_ session: Session, query: Form) async throws -> ConsolePage {
        let filter = JobFilterArguments(
            states: query["state"].flatMap(JobStatus.State.init(rawValue:)).map { [$0] }, kinds: query["kind"].map { [$0] },
            queues: query["queue"].map { [$0] }, errorCode: query["code"],
            createdAfter: try query["createdAfter"].map { try Show.parseDate($0, field: "created after") },
            createdBefore: try query["createdBefore"].map { try Show.parseDate($0, field: "created before") })
        let page = try await fleet.perform(fleet.jobsList, JobsListRequest(filter: filter, limit: 50, cursor: query["cursor"]), as: session.caller)
        var next: String?
        if let cursor = page.nextCursor {
            var components = URLComponents()
            components.queryItems = ["state", "kind", "queue", "code", "createdAfter", "createdBefore"].compactMap { name in
                query[name].map { URLQueryItem(name: name, value: $0) }
            } + [URLQueryItem(name: "cursor", value: cursor)]
            next = "/console/jobs?" + (components.percentEncodedQuery ?? "")
        }
        let body = ConsoleTemplates.render("jobs", [
            "states": JobStatus.State.allCases.map { ["name": $0.rawValue, "selected": query["state"] == $0.rawValue] },
            "kinds": FleetKinds.all.kinds.map(\.rawValue).sorted().map { ["name": $0, "selected": query["kind"] == $0] },
            "queue": query["queue"] ?? "", "code": query["code"] ?? "", "createdAfter": query["createdAfter"] ?? "",
            "createdBefore": query["createdBefore"] ?? "",
            "jobs": page.jobs.map { job in
                ["id": job.id, "kind": job.kind, "queue": job.queue, "state": job.state.rawValue, "attempt": job.attempt,
                 "maxAttempts": job.maxAttempts, "code": job.lastError?.code as Any, "error": job.lastError?.error ?? "",
                 "createdAt": Show.date(job.createdAt)] as [String: Any]
            },
            "next": next as Any,
        ])
        return ConsolePage(title: "Jobs", body: body, notice: query["done"] == "discarded" ? "The job was discarded." : nil)
    }

    func job(_ session: Session, id: Int64, notice: String?) async throws -> ConsolePage {
        let job = try await fleet.perform(fleet.jobGet, JobGetRequest(jobId: id), as: session.caller)
        let body = ConsoleTemplates.render("job", [
            "id": job.id, "live": !job.isTerminal || notice != nil, "jobLive": try await jobLive(session, job),
            "payload": Show.prettyJSON(job.payload), "result": job.result.map(Show.prettyJSON) as Any,
        ])
        let notices = ["retry": "The job was put back in the queue.", "cancel": "Cancellation was asked for."]
        return ConsolePage(title: "Job \(job.id)", body: body, notice: notice.flatMap { notices[$0] })
    }

    func jobLive(_ session: Session, id: Int64) async throws -> String {
        try await jobLive(session, try await fleet.perform(fleet.jobGet, JobGetRequest(jobId: id), as: session.caller))
    }

    /// Most jobs the page lists as running after this one.
    static let dependentsShown = 100

    private func jobLive(_ session: Session, _ job: JobStatus) async throws -> String {
        // What it runs after and what runs after it, with their states (`docs/queue.md`, "Dependencies").
        async let dependencies = job.after.isEmpty ? [] : fleet.queue.dependencies(of: job.id)
        async let dependents = fleet.queue.dependents(of: job.id, limit: Self.dependentsShown + 1)
        let linked = { (jobs: [JobDependency]) in
            jobs.prefix(Self.dependentsShown).map { ["id": $0.id, "kind": $0.kind.rawValue, "state": $0.state.rawValue] as [String: Any] }
        }
        let after = try await dependencies, before = try await dependents
        let duration = job.startedAt.map { started in Show.seconds((job.finishedAt ?? Date()).timeIntervalSince(started)) }
        return ConsoleTemplates.render("job-live", [
            "id": job.id, "state": job.state.rawValue, "cancelRequested": job.cancelRequested, "kind": job.kind, "queue": job.queue,
            "priority": job.priority, "attempt": job.attempt, "maxAttempts": job.maxAttempts, "idempotencyKey": job.idempotencyKey ?? "–",
            "workerId": job.workerId ?? "–", "createdAt": Show.date(job.createdAt), "runAt": Show.date(job.runAt),
            "startedAt": job.startedAt.map(Show.date) ?? "–", "finishedAt": job.finishedAt.map(Show.date) ?? "–",
            "canOperate": session.canOperate, "csrf": session.csrf,
            "canRetry": job.state == .dead || job.state == .cancelled, "canDiscard": job.isTerminal,
            "canCancel": !job.isTerminal && !job.cancelRequested,
            "errors": job.errors.map { error in
                ["attempt": error.attempt, "at": Show.date(error.at), "code": error.code ?? "–", "error": error.error,
                 "worker": error.worker ?? "–"] as [String: Any]
            },
            "duration": duration as Any,
            "after": linked(after), "hasAfter": !after.isEmpty, "waitingOn": job.waitingOn.map(String.init).joined(separator: ", "),
            "before": linked(before), "hasBefore": !before.isEmpty, "moreBefore": before.count > Self.dependentsShown,
        ])
    }

    // MARK: Dead jobs

    func dead(_ session: Session) async throws -> ConsolePage {
        let groups = try await fleet.deadGroups()
        let body = ConsoleTemplates.render("dead", [
            "canOperate": session.canOperate, "csrf": session.csrf,
            "groups": groups.map { group in
                ["kind": group.kind, "code": group.errorCode as Any, "actionable": group.errorCode != nil, "count": group.count,
                 "firstSeen": Show.date(group.firstSeen), "lastSeen": Show.date(group.lastSeen), "sampleJobId": group.sampleJobID,
                 "samplePayload": Show.prettyJSON(text: group.samplePayload)] as [String: Any]
            },
        ])
        return ConsolePage(title: "Dead jobs", body: body)
    }

    /// Retry or discard one group of dead jobs: first a page that asks, with the count a dry
    /// run finds; then (the form sent again with `confirm`) the op, and the count it changed.
    func deadGroupAction(_ session: Session, verb: String, form: Form) async throws -> Response {
        guard let kind = form["kind"], let code = form["code"] else { throw DispatcherError(.badArgument, "a group is a kind and an error code") }
        let filter = JobFilterArguments(states: [.dead], kinds: [kind], errorCode: code)
        let limit = JobsRetryRequest.maxLimit
        func run(dryRun: Bool) async throws -> Int {
            verb == "retry"
                ? try await fleet.perform(fleet.jobsRetry, JobsRetryRequest(filter: filter, limit: limit, dryRun: dryRun), as: session.caller).count
                : try await fleet.perform(fleet.jobsDiscard, JobsDiscardRequest(filter: filter, limit: limit, dryRun: dryRun), as: session.caller).count
        }
        guard form["confirm"] != nil else {
            let count = try await run(dryRun: true)
            let question = "\(verb == "retry" ? "Retry" : "Discard (delete)") \(count) dead \(kind) job\(count == 1 ? "" : "s") whose last error is \(code)?"
            let body = ConsoleTemplates.render("confirm", [
                "action": "/console/dead/\(verb)", "question": question, "csrf": session.csrf, "kind": kind, "code": code, "count": count,
                "button": verb == "retry" ? "Retry \(count)" : "Discard \(count)", "buttonClass": verb == "retry" ? "" : "danger",
            ])
            return ConsoleRoutes.html(ConsoleRoutes.layout(ConsolePage(title: "Confirm", body: body), session: session), status: .ok)
        }
        let changed = try await run(dryRun: false)
        let done = "\(verb == "retry" ? "Retried" : "Discarded") \(changed) \(kind) job\(changed == 1 ? "" : "s") (\(code))."
        var page = try await dead(session)
        page.notice = done
        return ConsoleRoutes.html(ConsoleRoutes.layout(page, session: session), status: .ok)
    }

    // MARK: Queues

    func queues(_ session: Session, notice: String?) async throws -> ConsolePage {
        let pauses = try await fleet.control.pauses()
        let kindPauses = Dictionary(pauses.filter { $0.target.scope == .kind }.map { ($0.target.name, $0) }, uniquingKeysWith: { first, _ in first })
        let body = ConsoleTemplates.render("queues", [
            "canOperate": session.canOperate, "csrf": session.csrf,
            "kinds": FleetKinds.all.kinds.map(\.rawValue).sorted().map { kind in
                let pause = kindPauses[kind]
                return ["name": kind, "paused": pause != nil, "pausedBy": pause?.pausedBy ?? "",
                        "pausedAt": pause.map { Show.date($0.pausedAt) } ?? ""] as [String: Any]
            },
            "queues": pauses.filter { $0.target.scope == .queue }.map { pause in
                ["name": pause.target.name, "pausedBy": pause.pausedBy, "pausedAt": Show.date(pause.pausedAt)] as [String: Any]
            },
        ])
        return ConsolePage(title: "Queues", body: body, notice: notice)
    }

    func queueAction(_ session: Session, verb: String, form: Form) async throws -> Response {
        let result = verb == "pause"
            ? try await fleet.perform(fleet.pause, QueuePauseRequest(kind: form["kind"], queue: form["queue"]), as: session.caller)
            : try await fleet.perform(fleet.resume, QueueResumeRequest(kind: form["kind"], queue: form["queue"]), as: session.caller)
        let target = form["kind"].map { "Kind \($0)" } ?? "Queue \(form["queue"] ?? "")"
        let notice = result.changed ? "\(target) \(verb == "pause" ? "paused" : "resumed")." : "\(target) was already \(verb == "pause" ? "paused" : "claimed")."
        return ConsoleRoutes.html(ConsoleRoutes.layout(try await queues(session, notice: notice), session: session), status: .ok)
    }

    // MARK: Workers, schedule, renders, audit

    func workers(_ session: Session) async throws -> ConsolePage {
        let body = ConsoleTemplates.render("workers", [
            "workers": try await fleet.workers().map { entry in
                ["id": entry.worker.record.id, "host": entry.worker.record.host, "pid": Int(entry.worker.record.pid),
                 "kinds": entry.worker.record.kinds.map(\.rawValue).joined(separator: ", "), "running": entry.worker.running,
                 "heartbeat": Show.ago(entry.worker.lastHeartbeatAt), "silent": entry.silent] as [String: Any]
            },
        ])
        return ConsolePage(title: "Workers", body: body)
    }

    func schedule(_ session: Session) async throws -> ConsolePage {
        let runs = try await fleet.lastSlots()
        let now = Date()
        let body = ConsoleTemplates.render("schedule", [
            "entries": fleet.schedule.entries.map { entry in
                let run = runs[entry.name]
                return ["name": entry.name, "expression": entry.expression.description, "lastSlot": run.map { Show.date($0.slotAt) } ?? "–",
                        "lastBy": run?.claimedBy as Any, "lastError": run?.error as Any, "lastJob": run?.jobID as Any,
                        "nextSlot": entry.expression.next(after: now).map(Show.date) ?? "–"] as [String: Any]
            },
        ])
        return ConsolePage(title: "Schedule", body: body)
    }

    func renders(_ session: Session, query: Form) async throws -> ConsolePage {
        let filter = RenderStore.Filter(status: query["status"], provider: query["provider"], userID: query["user"])
        async let lines = fleet.renders(filter)
        async let settings = fleet.renderSettings()
        let renderSettings = try await settings
        let body = ConsoleTemplates.render("renders", [
            "provider": renderSettings.provider, "categories": renderSettings.enabledCategories.map(\.rawValue).sorted().joined(separator: ", "),
            "statuses": ["pending", "processing", "complete", "failed"].map { (status: String) -> [String: Any] in
                ["name": status, "selected": query["status"] == status]
            },
            "providerFilter": query["provider"] ?? "", "userFilter": query["user"] ?? "",
            "renders": try await lines.map { render in
                ["id": render.id, "userId": render.userID ?? "(onboarding)", "provider": render.provider, "status": render.status,
                 "errorCode": render.errorCode as Any, "failureCode": render.failureCode as Any, "errorMessage": render.errorMessage as Any,
                 "category": render.category, "jobId": render.jobID as Any, "charged": render.charged,
                 "ledger": render.ledger.map { ["entry": $0.entry, "amount": $0.amount, "at": Show.date($0.at)] as [String: Any] },
                 "submission": render.providerSubmission.map { text in (try? JSONValue(json: text)).map { Show.prettyJSON(Show.abbreviated($0)) } ?? text } as Any,
                 "createdAt": Show.date(render.createdAt)] as [String: Any]
            },
        ])
        return ConsolePage(title: "Renders", body: body)
    }

    func audit(_ session: Session, query: Form) async throws -> ConsolePage {
        let page = try await fleet.perform(fleet.audit, AuditListRequest(limit: 50, cursor: query["cursor"]), as: session.caller)
        let body = ConsoleTemplates.render("audit", [
            "entries": page.entries.map { entry in
                ["at": Show.date(entry.at), "actor": entry.actor, "action": entry.action, "target": Show.compactJSON(entry.target),
                 "affected": entry.affected] as [String: Any]
            },
            "next": page.nextCursor.map { "/console/audit?cursor=\($0)" } as Any,
        ])
        return ConsolePage(title: "Audit trail", body: body)
    }
}

/// How values are written on the pages.
enum Show {
    static func date(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(timeZone: TimeZone(identifier: "UTC")!).year().month().day().time(includingFractionalSeconds: false).timeZone(separator: .omitted))
    }

    static func ago(_ date: Date) -> String { "\(seconds(Date().timeIntervalSince(date))) ago" }

    static func seconds(_ seconds: Double) -> String {
        seconds < 10 ? String(format: "%.2f s", seconds) : seconds < 120 ? "\(Int(seconds)) s" : seconds < 7200 ? "\(Int(seconds / 60)) min" : "\(Int(seconds / 3600)) h"
    }

    static func parseDate(_ text: String, field: String) throws -> Date {
        guard let date = try? Date(text, strategy: .iso8601) else {
            throw DispatcherError(.badArgument, "\(field): not an ISO 8601 date such as 2026-11-25T08:00:00Z")
        }
        return date
    }

    static func prettyJSON(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "\(value)"
    }

    static func prettyJSON(text: String) -> String {
        (try? JSONValue(json: text)).map(prettyJSON) ?? text
    }

    /// Long texts cut to their start: a synchronous provider's submission holds the rendered
    /// image inline (megabytes of base64), which a page of 50 renders must not carry.
    static func abbreviated(_ value: JSONValue, keeping limit: Int = 200) -> JSONValue {
        switch value {
        case .string(let text) where text.count > limit: .string("\(text.prefix(limit))… (\(text.count) characters)")
        case .array(let items): .array(items.map { abbreviated($0, keeping: limit) })
        case .object(let fields): .object(fields.mapValues { abbreviated($0, keeping: limit) })
        default: value
        }
    }

    static func compactJSON(_ value: JSONValue) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "\(value)"
    }
}

/// Completed and failed jobs per minute as an SVG bar chart drawn on the server: numbers only,
/// no text from a job, so it goes into the page as it is.
struct ThroughputChart {
    let minutes: [(completed: Int, failed: Int)]

    var maximum: Int { max(1, minutes.map { $0.completed + $0.failed }.max() ?? 0) }

    var svg: String {
        let width = 600.0, height = 120.0
        let barWidth = width / Double(max(minutes.count, 1))
        var bars = ""
        for (index, minute) in minutes.enumerated() {
            let x = Double(index) * barWidth
            let completedHeight = height * Double(minute.completed) / Double(maximum)
            let failedHeight = height * Double(minute.failed) / Double(maximum)
            if minute.completed > 0 {
                bars += "<rect class=\"ok\" x=\"\(fmt(x))\" y=\"\(fmt(height - completedHeight))\" width=\"\(fmt(barWidth - 1))\" height=\"\(fmt(completedHeight))\"/>"
            }
            if minute.failed > 0 {
                bars += "<rect class=\"bad\" x=\"\(fmt(x))\" y=\"\(fmt(height - completedHeight - failedHeight))\" width=\"\(fmt(barWidth - 1))\" height=\"\(fmt(failedHeight))\"/>"
            }
        }
        return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 600 120\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"jobs per minute\">\(bars)</svg>"
    }

    private func fmt(_ value: Double) -> String { String(format: "%.1f", value) }
}
