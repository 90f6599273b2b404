import FleetAccess
import DispatcherProtocol
import FleetHTTP
import FleetPostgres
import FleetQueue
import Foundation
import Hummingbird
import Logging
import NIOCore

/// The operator console under `/console` (`docs/console.md`), mounted on the dispatcher's HTTP
/// listener when `FLEET_CONSOLE=on`. Server-rendered pages; a login with an access token opens a
/// session (`ConsoleSessions`); every change is a POST carrying the session's CSRF token and goes
/// through the op that does it on the socket, under the token's name and role.
public struct ConsoleRoutes: HTTPRoutes {
    /// One header line (Hummingbird re-exports `HTTPFields`, not its element's name).
    typealias Field = HTTPFields.Element
    static let sessionCookie = "wb_console"
    static let loginCookie = "wb_console_login"
    static let maxFormBytes = 16 * 1024
    /// No inline script or style, nothing from another origin, no framing.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    let settings: ConsoleSettings
    let tokens: AccessTokens
    let sessions: ConsoleSessions
    let loginForms: ConsoleLoginForms
    let fleet: ConsoleFleet
    let logger: Logger

    public init(
        settings: ConsoleSettings, pool: PostgresPool, readPool: PostgresPool? = nil, tokens: AccessTokens, schedule: ScheduleSettings, liveWorkerWithin: Duration,
        logger: Logger
    ) {
        self.settings = settings
        self.tokens = tokens
        self.sessions = ConsoleSessions(pool: pool, lifetime: settings.sessionLifetime)
        self.loginForms = ConsoleLoginForms(pool: pool)
        self.fleet = ConsoleFleet(pool: pool, readPool: readPool, schedule: schedule, liveWorkerWithin: liveWorkerWithin, logger: logger)
        self.logger = logger
    }

    public func register(on router: Router<BasicRequestContext>) {
        guard settings.enabled else { return }
        let pages = ConsolePages(fleet: fleet)
        // Before the routes: it wraps them and the router's own answers (404, 405) under /console.
        router.add(middleware: ConsoleAnswers())
        router.get("/console/static/console.css") { _, _ in Self.asset(ConsoleAssets.stylesheet, type: "text/css; charset=utf-8") }
        router.get("/console/static/console.js") { _, _ in Self.asset(ConsoleAssets.script, type: "text/javascript; charset=utf-8") }
        router.get("/console/login") { request, _ in await loginPage(request, notice: nil, status: .ok) }
        router.post("/console/login") { request, _ in await login(request) }
        router.post("/console/logout") { request, _ in await action(request) { session, _ in
            try await sessions.end(session.secret)
            return Self.redirect("/console/login", cookies: [Self.expiredCookie(Self.sessionCookie, request: request)])
        } }

        router.get("/console") { request, _ in await page(request) { try await pages.overview($0) } }
        router.get("/console/live/overview") { request, _ in await fragment(request) { try await pages.overviewLive($0) } }
        router.get("/console/jobs") { request, _ in await page(request) { try await pages.jobs($0, query: Form(query: request.uri.query)) } }
        router.get("/console/jobs/:id") { request, context in
            await page(request) { try await pages.job($0, id: try Self.jobId(context), notice: Form(query: request.uri.query)["done"]) }
        }
        router.get("/console/live/jobs/:id") { request, context in
            await fragment(request) { try await pages.jobLive($0, id: try Self.jobId(context)) }
        }
        router.get("/console/dead") { request, _ in await page(request) { try await pages.dead($0) } }
        router.get("/console/queues") { request, _ in await page(request) { try await pages.queues($0, notice: nil) } }
        router.get("/console/workers") { request, _ in await page(request) { try await pages.workers($0) } }
        router.get("/console/schedule") { request, _ in await page(request) { try await pages.schedule($0) } }
        router.get("/console/renders") { request, _ in await page(request) { try await pages.renders($0, query: Form(query: request.uri.query)) } }
        router.get("/console/audit") { request, _ in await page(request) { try await pages.audit($0, query: Form(query: request.uri.query)) } }

        for verb in ["retry", "discard", "cancel"] {
            router.post("/console/jobs/:id/\(verb)") { request, context in
                await action(request) { session, _ in
                    let id = try Self.jobId(context)
                    switch verb {
                    case "retry": _ = try await fleet.perform(fleet.jobRetry, JobRetryRequest(jobId: id), as: session.caller)
                    case "discard":
                        _ = try await fleet.perform(fleet.jobDiscard, JobDiscardRequest(jobId: id), as: session.caller)
                        return Self.redirect("/console/jobs?done=discarded")
                    default: _ = try await fleet.cancelJob(id, as: session.caller)
                    }
                    return Self.redirect("/console/jobs/\(id)?done=\(verb)")
                }
            }
        }
        for verb in ["retry", "discard"] {
            router.post("/console/dead/\(verb)") { request, _ in
                await action(request) { session, form in try await pages.deadGroupAction(session, verb: verb, form: form) }
            }
        }
        for verb in ["pause", "resume"] {
            router.post("/console/queues/\(verb)") { request, _ in
                await action(request) { session, form in try await pages.queueAction(session, verb: verb, form: form) }
            }
        }
    }

    // MARK: Sessions

    /// The signed-in operator of a request: the caller its session's token names now.
    struct Session {
        let caller: Caller
        let secret: ConsoleSessions.Secret
        var csrf: String { secret.csrfToken }
        var canOperate: Bool { caller.role == .operate }
    }

    /// The session's caller is whoever its token is now: nil once the token is revoked.
    private func session(of request: Request) async throws -> Session? {
        guard let value = request.cookies[Self.sessionCookie]?.value, let secret = ConsoleSessions.Secret(cookie: value),
              let digest = try await sessions.tokenDigest(of: secret),
              let caller = tokens.caller(for: digest), caller.role != .submit
        else { return nil }
        return Session(caller: caller, secret: secret)
    }

    private func loginPage(_ request: Request, notice: String?, status: HTTPResponse.Status) async -> Response {
        // Login CSRF: the form carries a value the server signed, which must match a cookie set
        // with it (double submit), so another site cannot log a browser in with the attacker's token.
        let value: String
        do { value = try await loginForms.issue() } catch { return failure(error) }
        let body = ConsoleTemplates.render("login", ["loginCSRF": value])
        return Self.html(ConsoleTemplates.render("layout", ["title": "Log in", "body": body, "notice": notice as Any]), status: status,
                         cookies: [Self.cookie(Self.loginCookie, value, maxAge: ConsoleLoginForms.lifetime, request: request)])
    }

    private func login(_ request: Request) async -> Response {
        guard Self.isSameOrigin(request) else { return crossOriginRefusal(request) }
        let form: Form
        do { form = try await Form(body: request) } catch { return await loginPage(request, notice: "The form was too large.", status: .badRequest) }
        let issued: Bool
        do {
            guard let expected = request.cookies[Self.loginCookie]?.value, let sent = form["csrf"], constantTimeEqual(expected, sent) else {
                return Self.refused("The form's CSRF token is missing or wrong: reload the login page.", status: .forbidden)
            }
            issued = try await loginForms.isValid(sent)
        } catch {
            return failure(error)
        }
        guard issued else {
            logger.warning("console login with a form value this fleet did not issue, or an expired one")
            return Self.refused("The login form has expired or was not made here: reload the login page.", status: .forbidden)
        }
        guard let token = form["token"], let (caller, digest) = tokens.authenticate(token), caller.role != .submit else {
            // The same answer for an unknown token and a `submit` one: it tells a guesser nothing.
            logger.warning("console login refused")
            return await loginPage(request, notice: "That token is not a read or operate token of this fleet.", status: .unauthorized)
        }
        do {
            let secret = try await sessions.start(tokenDigest: digest, tokenName: caller.name)
            logger.info("console login", metadata: ["token": "\(caller.name)", "role": "\(caller.role.rawValue)"])
            let maxAge = Int(settings.sessionLifetime.components.seconds)
            return Self.redirect("/console", cookies: [
                Self.cookie(Self.sessionCookie, secret.hex, maxAge: maxAge, request: request), Self.expiredCookie(Self.loginCookie, request: request),
            ])
        } catch {
            return failure(error)
        }
    }

    // MARK: Handlers

    /// A full page for a signed-in operator; anyone else is sent to the login page.
    private func page(_ request: Request, _ render: (Session) async throws -> ConsolePage) async -> Response {
        do {
            guard let session = try await session(of: request) else { return Self.redirect("/console/login") }
            return Self.html(Self.layout(try await render(session), session: session), status: .ok)
        } catch {
            return failure(error)
        }
    }

    /// A fragment a page refreshes itself with; 401 without a session (the script reloads, to the login page).
    private func fragment(_ request: Request, _ render: (Session) async throws -> String) async -> Response {
        do {
            guard let session = try await session(of: request) else { return Self.refused("signed out", status: .unauthorized) }
            return Self.html(try await render(session), status: .ok)
        } catch {
            return failure(error)
        }
    }

    /// A POST: a session and its CSRF token, or nothing is done.
    private func action(_ request: Request, _ perform: (Session, Form) async throws -> Response) async -> Response {
        guard Self.isSameOrigin(request) else { return crossOriginRefusal(request) }
        do {
            guard let session = try await session(of: request) else { return Self.refused("Sign in first.", status: .unauthorized) }
            let form = try await Form(body: request)
            guard let sent = form["csrf"], constantTimeEqual(sent, session.csrf) else {
                logger.warning("console POST without a valid CSRF token", metadata: ["path": "\(request.uri.path)", "token": "\(session.caller.name)"])
                return Self.refused("The form's CSRF token is missing or wrong: nothing was done. Reload the page and try again.", status: .forbidden)
            }
            return try await perform(session, form)
        } catch {
            return failure(error)
        }
    }

    private func crossOriginRefusal(_ request: Request) -> Response {
        logger.warning("console POST from another origin", metadata: [
            "path": "\(request.uri.path)", "origin": "\(request.headers[.origin]?.prefix(200) ?? "")",
        ])
        return Self.refused("This form was sent from another site: nothing was done.", status: .forbidden)
    }

    /// An error as a page: the protocol's refusals with their message, anything else without detail.
    private func failure(_ error: any Error) -> Response {
        let refusal = error as? DispatcherError ?? DispatcherError(mapping: error)
        let status: HTTPResponse.Status = switch refusal.code {
        case .forbidden: .forbidden
        case .notFound: .notFound
        case .badArgument, .unknownKind: .badRequest
        case .jobNotRetryable, .jobNotFinished: .conflict
        case .unavailable: .serviceUnavailable
        default: .internalServerError
        }
        if status == .internalServerError { logger.error("console page failed", metadata: ["error": "\(error)"]) }
        return Self.refused(refusal.message, status: status)
    }

    // MARK: Responses

    static func layout(_ page: ConsolePage, session: Session) -> String {
        ConsoleTemplates.render("layout", [
            "title": page.title, "body": page.body, "notice": page.notice as Any, "signedIn": true, "csrf": session.csrf,
            "tokenName": session.caller.name, "role": session.caller.role.rawValue,
        ])
    }

    static func refused(_ message: String, status: HTTPResponse.Status) -> Response {
        let body = ConsoleTemplates.render("message", ["message": message, "back": "/console"])
        return html(ConsoleTemplates.render("layout", ["title": "\(status.code) \(status.reasonPhrase)", "body": body]), status: status)
    }

    static func html(_ text: String, status: HTTPResponse.Status, cookies: [String] = []) -> Response {
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        for cookie in cookies { headers.append(Field(name: .setCookie, value: cookie)) }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func asset(_ text: String, type: String) -> Response {
        var headers = securityHeaders
        headers[.contentType] = type
        headers[.cacheControl] = "max-age=300"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    /// After a POST, to a page (303: the browser GETs it, and a reload does not repeat the POST).
    static func redirect(_ location: String, cookies: [String] = []) -> Response {
        var headers = securityHeaders
        headers[.location] = location
        for cookie in cookies { headers.append(Field(name: .setCookie, value: cookie)) }
        return Response(status: .seeOther, headers: headers)
    }

    /// `Referrer-Policy: same-origin`, not `no-referrer`: under `no-referrer` a browser sends
    /// `Origin: null` with the console's own form POSTs, and the origin check refuses `null`.
    static var securityHeaders: HTTPFields {
        [
            .contentSecurityPolicy: contentSecurityPolicy, .cacheControl: "no-store", Field.Name("X-Content-Type-Options")!: "nosniff",
            Field.Name("Referrer-Policy")!: "same-origin", Field.Name("X-Frame-Options")!: "DENY",
        ]
    }

    /// HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), scoped to
    /// `/console`, expiring with the session; Secure when the browser reached us over TLS (a
    /// TLS-terminating proxy says so with `X-Forwarded-Proto: https`), so it never crosses in clear.
    static func cookie(_ name: String, _ value: String, maxAge: Int, request: Request) -> String {
        "\(name)=\(value); Path=/console; Max-Age=\(maxAge); HttpOnly; SameSite=Strict" + (servedOverTLS(request) ? "; Secure" : "")
    }

    static func expiredCookie(_ name: String, request: Request) -> String { cookie(name, "", maxAge: 0, request: request) }

    static func servedOverTLS(_ request: Request) -> Bool {
        request.uri.scheme == .https || request.headers[Field.Name("X-Forwarded-Proto")!]?.lowercased() == "https"
    }

    /// Whether a POST came from a page of this console: its `Origin` (every current browser sends
    /// one with a POST) names the host the request was sent to, over HTTPS when the request came
    /// over TLS. A POST with no `Origin` is not from a browser's cross-site form; the CSRF token
    /// still guards it. `Origin: null` (sandboxed frames, some redirects) is refused.
    static func isSameOrigin(_ request: Request) -> Bool {
        guard let origin = request.headers[.origin] else { return true }
        guard let url = URL(string: origin), let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(),
              url.path.isEmpty, url.query == nil
        else { return false }
        let authority = url.port.map { "\(host):\($0)" } ?? host
        let requested = (request.headers[Field.Name("X-Forwarded-Host")!] ?? request.head.authority ?? "").lowercased()
        guard scheme == "https" || (scheme == "http" && !servedOverTLS(request)) else { return false }
        return authority == requested || authority == Self.withoutDefaultPort(requested, scheme: scheme)
    }

    /// `host:443` as `host` for https (and `:80` for http): a browser's Origin leaves the default port out.
    private static func withoutDefaultPort(_ authority: String, scheme: String) -> String {
        let defaultPort = scheme == "https" ? ":443" : ":80"
        return authority.hasSuffix(defaultPort) ? String(authority.dropLast(defaultPort.count)) : authority
    }

    static func jobId(_ context: BasicRequestContext) throws -> Int64 {
        guard let id = context.parameters.get("id", as: Int64.self), id > 0 else { throw DispatcherError(.notFound, "no such job") }
        return id
    }
}

/// Every answer under `/console` is a console page with the console's security headers,
/// including those the router makes itself (no such page, a method a path does not take) and the
/// errors a handler did not catch. Other paths of the listener pass through untouched.
struct ConsoleAnswers: RouterMiddleware {
    typealias Context = BasicRequestContext

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path == "/console" || path.hasPrefix("/console/") else { return try await next(request, context) }
        do {
            var response = try await next(request, context)
            for field in ConsoleRoutes.securityHeaders where response.headers[field.name] == nil { response.headers.append(field) }
            return response
        } catch let error as HTTPError {
            return ConsoleRoutes.refused(error.body ?? error.status.reasonPhrase, status: error.status)
        } catch {
            return ConsoleRoutes.refused("The console could not answer.", status: .internalServerError)
        }
    }
}

/// A page's title, its body (HTML the templates made) and a notice above it.
struct ConsolePage {
    let title: String
    let body: String
    var notice: String?
}

/// The fields of a form or a query string (`application/x-www-form-urlencoded`), first value of each name.
struct Form {
    private(set) var fields: [String: [String]] = [:]

    init(query: String?) {
        for pair in (query ?? "").split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.decode(parts[0]) else { continue }
            fields[name, default: []].append(parts.count > 1 ? Self.decode(parts[1]) ?? "" : "")
        }
    }

    init(body request: Request) async throws {
        let buffer = try await request.body.collect(upTo: ConsoleRoutes.maxFormBytes)
        self.init(query: String(buffer: buffer))
    }

    /// The value, nil when absent or empty.
    subscript(_ name: String) -> String? {
        guard let value = fields[name]?.first, !value.isEmpty else { return nil }
        return value
    }

    private static func decode(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}
