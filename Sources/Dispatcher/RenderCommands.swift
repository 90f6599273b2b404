import ArgumentParser
import DispatcherProtocol
import Foundation
import Renders

/// `dispatcher render …`: the render ops for operators and scripts (each one request).
struct Render: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Request, inspect, wait for, rate and retry renders.",
        subcommands: [RequestRender.self, RenderStatus.self, WaitRender.self, ListRenders.self, RenderFeedback.self, RetryRender.self])
}

/// `dispatcher renders …`: operators' commands on many renders at once.
struct RendersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "renders", abstract: "Act on many renders at once (operators).", subcommands: [RetryRenders.self])
}

/// How the retry commands print: a table for people, or the op's answer as JSON.
struct RetryOutput: ParsableArguments {
    @Flag(help: "Only list the renders it would retry (credits are not checked).") var dryRun = false
    @OptionGroup var format: OutputFormat

    func print(_ result: RetryRendersRequest.Result) throws {
        try format.print(result) { result in
            var table = TextTable("RENDER", "RESULT", "WHY")
            for id in result.renderIds { table.append(id, result.dryRun ? "would retry" : "retried", "") }
            for refusal in result.refused { table.append(refusal.renderId, refusal.code.rawValue, refusal.message) }
            let summary = result.dryRun
                ? "\(result.count) failed render(s) would be retried; nothing changed"
                : "\(result.count) retried, \(result.refused.count) refused"
            return table.text + "\n" + summary
        }
    }
}

struct RetryRender: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry", abstract: "Retry one failed render: pending again with a new deadline, its credit reserved again.",
        discussion: """
            The render's job (and any failed job making its photos) runs again; its completion callback is sent again \
            at its new end. Refused INSUFFICIENT_CREDITS when its user has no credit left (it stays failed), \
            RENDER_NOT_RETRYABLE when it is not failed. A render that failed for its photo is retried only this way, once its cause is fixed. Needs the operate role. docs/operations.md, "Failed renders".
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The render id.") var renderId: String
    @OptionGroup var output: RetryOutput

    func run() async throws {
        try output.print(try await connection.send(RetryRendersRequest(renderId: renderId, dryRun: output.dryRun)))
    }
}

struct RetryRenders: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry", abstract: "Retry the failed renders matching a filter, the oldest failure first.",
        discussion: "Each render as `render retry` does, on its own; those refused stay failed and are listed with why. Renders that failed for their photo (PROVIDER_REJECTED, IMAGE_INVALID) are not retried.")
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The render's error code: RENDER_FAILED or RENDER_TIMEOUT.") var errorCode: String?
    @Option(help: "Why it failed, e.g. PROVIDER_DOWN, TIMEOUT, STORAGE (technical failures only are retried).") var failureCode: String?
    @Option(help: "The render's provider, e.g. fal-fashn.") var provider: String?
    @Option(help: "Failed within this look-back (30m, 1h, 2d).") var since: LookBack?
    @Option(help: "At most this many renders (up to \(RetryRendersRequest.maxLimit)).") var limit = RetryRendersRequest.defaultLimit
    @OptionGroup var output: RetryOutput

    func run() async throws {
        try output.print(try await connection.send(RetryRendersRequest(
            errorCode: errorCode, failureCode: failureCode, provider: provider, since: since?.date, limit: limit, dryRun: output.dryRun)))
    }
}

struct RequestRender: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request", abstract: "Request a render for a user (a credit is reserved unless they subscribe) or an onboarding token.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The render's id (asking again with the same id returns the first render).") var renderId: String
    @Option(help: "The user asking.") var user: String?
    @Option(help: "An onboarding token instead of a user (read from the environment variable named here).") var tokenVariable: String?
    @Option(help: "The garment id.") var garment: String
    @Option(help: "The body photo id.") var body: String
    @Option(help: "The upload the body photo is still to be normalised from (the render runs after it).") var bodyUpload: String?
    @Option(help: "The upload the garment is still to be normalised and cut out from (the render runs after both).") var garmentUpload: String?
    @Option(help: "tops, bottoms, dresses, shoes or outerwear.") var category: String
    @Option(help: "Where the fleet POSTs the render's signed end (a host in FLEET_OUTBOUND_HOSTS).") var callbackUrl: String?

    func run() async throws {
        let token = try tokenVariable.map { name in
            guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else { throw ValidationError("\(name) is not set") }
            return value
        }
        try printJSON(try await connection.send(RequestRenderRequest(
            renderId: renderId, userId: user, ephemeralToken: token, garmentId: garment, bodyPhotoId: body, category: category,
            callbackUrl: callbackUrl, bodyUploadId: bodyUpload, garmentUploadId: garmentUpload)))
    }
}

struct RenderStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Print one render.",
        discussion: """
            With --jobs, also its render.run job and the jobs it runs after (the photos' normalise and cut-out \
            jobs, and the request's `after`), each with its state and last error: where a failed input shows.
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The render id.") var renderId: String
    @Flag(help: "Also print its job and the jobs it runs after.") var jobs = false

    /// The render with the jobs that decide it.
    struct WithJobs: Encodable {
        let render: RenderView
        let jobs: [JobStatus]
    }

    func run() async throws {
        let render = try await connection.send(RenderStatusRequest(renderId: renderId))
        guard jobs else { return try printJSON(render) }
        var found: [JobStatus] = []
        if let jobID = render.jobId {
            let run = try await connection.send(StatusRequest(jobId: jobID))
            found = [run]
            for input in run.after { found.append(try await connection.send(StatusRequest(jobId: input))) }
        }
        try printJSON(WithJobs(render: render, jobs: found))
    }
}

struct WaitRender: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wait", abstract: "Wait until a render is complete or failed and print it.",
        discussion: "Exits 0 when the render ended, 2 when the timeout passed first.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The render id.") var renderId: String
    @OptionGroup var timeout: WaitTimeout

    func run() async throws {
        let result = try await connection.send(WaitRenderRequest(renderId: renderId, timeoutMs: timeout.milliseconds))
        try printJSON(result.render)
        if result.timedOut { throw ExitCode(2) }
    }
}

struct ListRenders: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "A user's renders, newest first.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The user id.") var user: String
    @Option(help: "At most this many (default \(ListRendersRequest.defaultLimit)).") var limit: Int?

    func run() async throws { try printJSON(try await connection.send(ListRendersRequest(userId: user, limit: limit))) }
}

struct RenderFeedback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "feedback", abstract: "Thumbs up or down on a complete render (down refunds its credit once).")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The render id.") var renderId: String
    @Argument(help: "up or down.") var vote: RenderFeedbackRequest.Vote
    @Option(help: "The render's user.") var user: String
    @Option(help: "The quick category picked (fit, colour, quality…).") var category: String?

    func run() async throws {
        try printJSON(try await connection.send(RenderFeedbackRequest(renderId: renderId, userId: user, vote: vote, category: category)))
    }
}

struct IssueToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Issue an onboarding token (one free render until it expires).")
    @OptionGroup var connection: ConnectionOptions

    func run() async throws { try printJSON(try await connection.send(IssueTokenRequest())) }
}

struct LinkAccount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Link an onboarding token to a new account: its render moves over, free credits are granted once.")
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The new user's id.") var user: String
    @Option(help: "The environment variable holding the onboarding token (kept off the command line).") var tokenVariable = "FLEET_ONBOARDING_TOKEN"

    func run() async throws {
        guard let token = ProcessInfo.processInfo.environment[tokenVariable], !token.isEmpty else { throw ValidationError("\(tokenVariable) is not set") }
        try printJSON(try await connection.send(LinkAccountRequest(ephemeralToken: token, userId: user)))
    }
}

extension RenderFeedbackRequest.Vote: ExpressibleByArgument {}

/// `dispatcher credits …`: a user's balance.
struct Credits: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "A user's credits and subscription.", subcommands: [Get.self])

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a user's balance: granted, consumed, reserved, available, and whether renders are free now (subscribed).")
        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "The user id.") var user: String

        func run() async throws { try printJSON(try await connection.send(CreditsGetRequest(userId: user))) }
    }
}
