@testable import DispatcherCore
@testable import FleetAccess
import DispatcherProtocol
import FleetHTTP
import FleetPostgres
@testable import FleetQueue
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Logging
import ServiceLifecycle
import Testing

/// The operator console over real HTTP against a real PostgreSQL: logins and sessions, CSRF,
/// roles, escaping, secrets, the audit trail (docs/console.md). The browser's view is
/// `scripts/console-browser-test.py`.
@Suite(.serialized) struct ConsoleTests {
    static let environmentToken = "console-test-environment-token-0123456789"
    static let xssScript = "<script>alert(1)</script>"
    static let xssImage = "\"><img src=x onerror=alert(2)>"

    /// A dispatcher's HTTP listener with the console on, its tokens loaded: `read` and `operate` named tokens.
    struct Console: ConsoleClient {
        let port: Int
        let q: TestQueue
        let readToken: String
        let operateToken: String
        let tokens: AccessTokens
    }

    static func withConsole(enabled: Bool = true, _ body: (Console) async throws -> Void) async throws {
        let q = try await TestQueue.make()
        let store = AccessTokenStore(pool: q.pool)
        let readToken = try await store.create(name: "viewer", role: .read)
        let operateToken = try await store.create(name: "ops", role: .operate)
        let tokens = AccessTokens(environmentToken: environmentToken, store: store, logger: testLogger)
        try await tokens.load()
        let routes = ConsoleRoutes(settings: ConsoleSettings(enabled: enabled), pool: q.pool, tokens: tokens,
                                   schedule: try MaintenanceTasks.schedule(from: [:]), liveWorkerWithin: .seconds(90), logger: testLogger)
        let listener = HTTPListener(address: ListenAddress(host: "127.0.0.1", port: 0), routes: [routes], logger: testLogger)
        let group = ServiceGroup(configuration: .init(services: [.init(service: listener)], logger: testLogger))
        let running = Task { try await group.run() }
        guard let port = await listener.boundPort() else { throw TestFailure("the console's listener did not start") }
        let console = Console(port: port, q: q, readToken: readToken, operateToken: operateToken, tokens: tokens)
        do { try await body(console) } catch {
            await group.triggerGracefulShutdown()
            _ = await running.result
            throw error
        }
        await group.triggerGracefulShutdown()
        _ = await running.result
    }

    /// Dead `drill.script` jobs with this payload and last error.
    static func makeDead(_ q: TestQueue, payload: String = "{}", error: String = "failed", code: String, count: Int = 1) async throws -> [Int64] {
        let jobs = try await q.queue.enqueue((0..<count).map { _ in NewJob(kind: .drillScript, payload: payload, maxAttempts: 1) })
        let claimed = try await q.driver.jobClaim(ClaimRequest(owner: "w", lease: .seconds(30), slots: [.drillScript: count])).jobs
        _ = try await q.driver.jobFinishMany(owner: "w", outcomes: claimed.map {
            JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .dead(error: error, code: JobErrorCode(rawValue: code)))
        })
        return jobs.map(\.id)
    }

    static func state(_ q: TestQueue, _ id: Int64) async throws -> String? {
        try await q.pool.query("SELECT state::text AS state FROM jobs WHERE id = $1", [id]).rows.first?["state"]
    }

    @Test func pagesNeedALoginWithAReadOrOperateTokenAndTheCookieIsLockedDown() async throws {
        try await Self.withConsole { console in
            // Signed out: every page sends to the login page; a live fragment answers 401.
            let overview = try await console.get("/console")
            #expect(overview.status == 303)
            #expect(overview.header("Location") == "/console/login")
            #expect(try await console.get("/console/live/overview").status == 401)

            // A wrong token and a `submit` token are refused alike; no session cookie is set.
            let submitToken = try await AccessTokenStore(pool: console.q.pool).create(name: "backend", role: .submit)
            try await console.tokens.load()
            for token in ["wbt_" + String(repeating: "0", count: 64), submitToken] {
                let form = try await console.get("/console/login")
                let loginCSRF = try #require(form.cookie(ConsoleRoutes.loginCookie)?.value)
                let refused = try await RawHTTP.send(port: console.port, "POST", "/console/login", cookies: [ConsoleRoutes.loginCookie: loginCSRF],
                                               form: ["csrf": loginCSRF, "token": token])
                #expect(refused.status == 401)
                #expect(refused.cookie(ConsoleRoutes.sessionCookie) == nil)
            }

            // A login without the form's CSRF value (another site's form) is refused.
            let forged = try await RawHTTP.send(port: console.port, "POST", "/console/login", form: ["token": console.readToken])
            #expect(forged.status == 403)
            #expect(forged.cookie(ConsoleRoutes.sessionCookie) == nil)

            // A read token logs in: the cookie is HttpOnly, SameSite=Strict, expiring, not Secure over plain HTTP.
            let (session, response) = try await console.login(console.readToken)
            #expect(response.status == 303)
            #expect(response.header("Location") == "/console")
            let line = try #require(response.cookie(ConsoleRoutes.sessionCookie)?.line)
            #expect(line.contains("HttpOnly"))
            #expect(line.contains("SameSite=Strict"))
            #expect(line.contains("Max-Age=28800"))
            #expect(line.contains("Path=/console"))
            #expect(!line.contains("Secure"))
            // Behind a TLS-terminating proxy the cookie is Secure.
            let (_, overTLS) = try await console.login(console.readToken, headers: ["X-Forwarded-Proto": "https"])
            #expect(overTLS.cookie(ConsoleRoutes.sessionCookie)?.line.contains("; Secure") == true)

            // The table holds the secret's digest, never the secret, and the token's digest, never the token.
            let tokenDigest = AccessTokens.digest(console.readToken).hexString
            let rows = try await console.q.pool.query(
                "SELECT encode(secret_hash, 'hex') AS hash, encode(token_hash, 'hex') AS token, expires_at > now() + interval '7 hours' AS long FROM console_sessions").rows
            #expect(rows.count == 2)
            #expect(rows.allSatisfy { $0["hash"] != session && $0["token"] == tokenDigest && $0["long"] == "t" })

            let page = try await console.get("/console", session: session)
            #expect(page.status == 200)
            #expect(page.body.contains("viewer"))
            #expect(page.header("Content-Security-Policy") == ConsoleRoutes.contentSecurityPolicy)
            #expect(ConsoleRoutes.contentSecurityPolicy.contains("script-src 'self'"))
            #expect(!ConsoleRoutes.contentSecurityPolicy.contains("unsafe-inline"))
            #expect(!page.body.contains("<script>"))  // the only script is the file /console/static/console.js
            #expect(page.header("X-Frame-Options") == "DENY")

            // Logout needs the CSRF token too; then the session is gone from the table, for every dispatcher.
            #expect(try await console.post("/console/logout", session: session, form: [:]).status == 403)
            let logout = try await console.post("/console/logout", session: session, form: ["csrf": try await console.csrf(session)])
            #expect(logout.status == 303)
            #expect(logout.cookie(ConsoleRoutes.sessionCookie)?.line.contains("Max-Age=0") == true)
            #expect(try await console.get("/console", session: session).status == 303)
            #expect(try await console.q.pool.query("SELECT 1 FROM console_sessions WHERE token_hash = decode($1, 'hex')", [tokenDigest]).rows.count == 1)
        }
    }

    @Test func readSeesNoActionsAndCannotActOperateActsWithCSRFAndIsAudited() async throws {
        try await Self.withConsole { console in
            let dead = try await Self.makeDead(console.q, code: "PROVIDER_DOWN", count: 3)
            let (reader, _) = try await console.login(console.readToken)
            let readPage = try await console.get("/console/jobs/\(dead[0])", session: reader)
            #expect(readPage.status == 200)
            #expect(readPage.body.contains("PROVIDER_DOWN"))
            #expect(!readPage.body.contains("/console/jobs/\(dead[0])/retry"))
            #expect(!(try await console.get("/console/dead", session: reader).body.contains("Retry group")))
            // Even with its own valid CSRF token, a read session cannot act.
            let refused = try await console.post("/console/jobs/\(dead[0])/retry", session: reader, form: ["csrf": try await console.csrf(reader)])
            #expect(refused.status == 403)
            #expect(try await Self.state(console.q, dead[0]) == "dead")

            let (operator_, _) = try await console.login(console.operateToken)
            #expect(try await console.get("/console/jobs/\(dead[0])", session: operator_).body.contains("/console/jobs/\(dead[0])/retry"))
            // Without the CSRF token, or with another session's, nothing is done.
            #expect(try await console.post("/console/jobs/\(dead[0])/retry", session: operator_, form: [:]).status == 403)
            #expect(try await console.post("/console/jobs/\(dead[0])/retry", session: operator_, form: ["csrf": try await console.csrf(reader)]).status == 403)
            #expect(try await Self.state(console.q, dead[0]) == "dead")

            let csrf = try await console.csrf(operator_)
            let retried = try await console.post("/console/jobs/\(dead[0])/retry", session: operator_, form: ["csrf": csrf])
            #expect(retried.status == 303)
            #expect(retried.header("Location") == "/console/jobs/\(dead[0])?done=retry")
            #expect(try await Self.state(console.q, dead[0]) == "available")

            // The group (kind + code): a confirmation with the dry run's count, then the count retried.
            let ask = try await console.post("/console/dead/retry", session: operator_, form: ["csrf": csrf, "kind": "drill.script", "code": "PROVIDER_DOWN"])
            #expect(ask.status == 200)
            #expect(ask.body.contains("Retry 2 dead drill.script jobs whose last error is PROVIDER_DOWN?"))
            #expect(try await Self.state(console.q, dead[1]) == "dead")
            let done = try await console.post("/console/dead/retry", session: operator_,
                                        form: ["csrf": csrf, "kind": "drill.script", "code": "PROVIDER_DOWN", "confirm": "2"])
            #expect(done.body.contains("Retried 2 drill.script jobs (PROVIDER_DOWN)."))
            #expect(try await Self.state(console.q, dead[1]) == "available")

            // Pause a kind and cancel a queued job.
            #expect(try await console.post("/console/queues/pause", session: operator_, form: ["csrf": csrf, "kind": "drill.noop"]).status == 200)
            #expect(try await console.q.pool.query("SELECT paused_by FROM queue_pauses WHERE scope = 'kind' AND name = 'drill.noop'").rows.first?["paused_by"] == "ops")
            #expect(try await console.post("/console/jobs/\(dead[2])/cancel", session: operator_, form: ["csrf": csrf]).status == 303)
            #expect(try await Self.state(console.q, dead[2]) == "cancelled")

            // Every action in the audit trail under the token's name, and shown on the audit page.
            let trail = try await console.q.pool.query("SELECT actor, action, affected FROM operator_audit ORDER BY id").rows
            #expect(trail.map { "\($0["actor"]!) \($0["action"]!) \($0["affected"]!)" } == [
                "ops job.retry 1", "ops jobs.retry 2", "ops queue.pause 1", "ops job.cancel 1",
            ])
            let auditPage = try await console.get("/console/audit", session: reader).body
            #expect(auditPage.contains("job.cancel"))
            #expect(auditPage.contains("<td class=\"actor\">ops</td>"))
        }
    }

    @Test func valuesFromUsersAndProvidersAreShownAsTextAndNoSecretReachesAPage() async throws {
        try await Self.withConsole { console in
            let payload = String(decoding: try JSONEncoder().encode(["note": Self.xssScript, "name": Self.xssImage]), as: UTF8.self)
            let dead = try await Self.makeDead(console.q, payload: payload, error: "provider said \(Self.xssImage)", code: "XSS_CODE")
            let (session, _) = try await console.login(console.operateToken)
            var pages: [String] = []
            for path in ["/console", "/console/jobs", "/console/jobs/\(dead[0])", "/console/live/jobs/\(dead[0])", "/console/dead",
                         "/console/queues", "/console/workers", "/console/schedule", "/console/renders", "/console/audit",
                         "/console/jobs?code=%3Cscript%3Ealert(1)%3C/script%3E"] {
                let page = try await console.get(path, session: session)
                #expect(page.status == 200, "\(path)")
                #expect(!page.body.contains("nil"), "\(path): an absent value is shown as nothing, not \"nil\"")
                pages.append(page.body)
            }
            let all = pages.joined()
            #expect(!all.contains(Self.xssScript))
            #expect(!all.contains("<img src=x"))
            let jobPage = pages[2]
            #expect(jobPage.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
            #expect(jobPage.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"))
            #expect(pages[4].contains("&lt;script&gt;alert(1)&lt;/script&gt;"))  // the dead group's sample payload
            #expect(pages[10].contains("value=\"&lt;script&gt;alert(1)&lt;/script&gt;\""))  // the filter form's echo
            // No token reaches a page (the session's own cookie neither).
            for secret in [Self.environmentToken, console.readToken, console.operateToken, session] {
                #expect(!all.contains(secret))
            }
        }
    }

    @Test func rendersShowTheirLedgerAndProviderSubmissionFilteredByStatusProviderAndUser() async throws {
        try await Self.withConsole { console in
            try await console.q.pool.query("""
                INSERT INTO renders (id, user_id, owner_id, garment_id, body_photo_id, category, provider, status, error_code, charged,
                                     provider_submission, deadline_at, failure_code, error_message)
                VALUES ('r-done', $1, 'u1', 'g1', 'b1', 'tops', 'fal-fashn', 'complete', NULL, true, $2::jsonb, now(), NULL, NULL),
                       ('r-failed', 'u2', 'u2', 'g2', 'b2', 'tops', 'local', 'failed', 'RENDER_FAILED', true, NULL, now(),
                        'PROVIDER_DOWN', $3)
                """, [Self.xssScript, String(decoding: try JSONEncoder().encode(
                    ["request_id": Self.xssImage, "image": String(repeating: "A", count: 100_000)]), as: UTF8.self),
                      "local: temporary failure: HTTP 503: \(Self.xssImage)"])
            try await console.q.pool.query("""
                INSERT INTO credit_ledger (key, user_id, render_id, entry, amount)
                VALUES ('k1', $1, 'r-done', 'reserve', -1), ('k2', $1, 'r-done', 'consume', 0), ('k3', 'u2', 'r-failed', 'release', 1)
                """, [Self.xssScript])
            let (session, _) = try await console.login(console.readToken)
            let all = try await console.get("/console/renders", session: session).body
            #expect(all.contains("r-done") && all.contains("r-failed"))
            #expect(all.contains("reserve -1") && all.contains("consume 0") && all.contains("release 1"))
            #expect(all.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !all.contains(Self.xssScript))
            #expect(all.contains("&quot;&gt;&lt;img src=x") && !all.contains("<img src=x"))
            #expect(all.contains("id=\"render-provider\">local</dd>"))  // the settings' default provider, read only
            // An inline image in a submission is cut to its start, not sent whole.
            #expect(all.contains(String(repeating: "A", count: 200) + "… (100000 characters)"))
            #expect(all.utf8.count < 50_000)
            let failed = try await console.get("/console/renders?status=failed", session: session).body
            #expect(failed.contains("r-failed") && !failed.contains("r-done") && failed.contains("RENDER_FAILED"))
            // Why it failed, beside its status; the provider's text escaped.
            #expect(failed.contains("<code class=\"failure-code\">PROVIDER_DOWN</code>"), "\(failed)")
            #expect(failed.contains("<div class=\"failure-reason hint\">local: temporary failure: HTTP 503: &quot;&gt;&lt;img src=x"), "\(failed)")
            let byProvider = try await console.get("/console/renders?provider=fal-fashn", session: session).body
            #expect(byProvider.contains("r-done") && !byProvider.contains("r-failed"))
            let byUser = try await console.get("/console/renders?user=u2", session: session).body
            #expect(byUser.contains("r-failed") && !byUser.contains("r-done"))
        }
    }

    @Test func theOverviewCountsTheQueueAndWhatFinishedInTheLastHour() async throws {
        try await Self.withConsole { console in
            let queued = try await console.q.queue.enqueue((0..<3).map { _ in NewJob(kind: .drillNoop) } + [NewJob(kind: .drillNoop, delay: .seconds(600))])
            var waiting = NewJob(kind: .drillNoop)
            waiting.after = [queued[3].id]
            _ = try await console.q.queue.enqueue(waiting)
            _ = try await Self.makeDead(console.q, code: "PROVIDER_DOWN", count: 2)
            let (session, _) = try await console.login(console.operateToken)
            _ = try await console.post("/console/queues/pause", session: session, form: ["csrf": try await console.csrf(session), "kind": "drill.noop"])
            let live = try await console.get("/console/live/overview", session: session).body
            // due, running, retrying, scheduled, waiting, dead (1 h), completed (1 h)
            #expect(live.contains("drill.noop</a></td><td>3</td><td>0</td><td>0</td><td>1</td><td class=\"waiting\">1</td><td>0</td><td class=\"completed\">0</td>"))
            #expect(live.contains("drill.script</a></td><td>0</td><td>0</td><td>0</td><td>0</td><td class=\"waiting\">0</td><td>2</td><td class=\"completed\">0</td>"))
            #expect(live.contains("paused"))
            #expect(live.contains("<rect class=\"bad\""))  // the two dead jobs in the chart's last minute
            #expect(!live.contains("<rect class=\"ok\""))
        }
    }

    /// The overview names the session holding the oldest snapshot in the fleet's database, as the
    /// alert `FleetSnapshotHeld` does (escaped: an application name is anyone's text).
    @Test func theOverviewNamesTheSessionHoldingTheOldestSnapshot() async throws {
        try await Self.withConsole { console in
            let dump = try await PostgresConnection.connect(console.q.url, applicationName: "pg_dump <nightly>")
            try await dump.query("BEGIN ISOLATION LEVEL REPEATABLE READ")
            _ = try await dump.query("SELECT 1 FROM jobs LIMIT 1")
            let (session, _) = try await console.login(console.readToken)
            // An autovacuum of the new database begun before the dump holds an older snapshot
            // until it ends: the line names the oldest holder, so wait for the dump to be it.
            var live = ""
            try await console.q.waitUntil(timeout: .seconds(60), "the dump named as the oldest holder") {
                live = try await console.get("/console/live/overview", session: session).body
                return live.contains("held by pg_dump &lt;nightly&gt; (idle in transaction)</p>")
            }
            #expect(live.contains("<p class=\"hint\" id=\"snapshot-horizon\">Oldest snapshot: "), "\(live)")
            try await dump.query("ROLLBACK")
        }
    }

    @Test func aJobPageListsWhatItRunsAfterAndWhatRunsAfterItWithLinksAndStates() async throws {
        try await Self.withConsole { console in
            let dead = try await Self.makeDead(console.q, code: "PROVIDER_DOWN")
            let upstream = try await console.q.queue.enqueue(NewJob(kind: .drillNoop, delay: .seconds(600))).id
            var middle = NewJob(kind: .drillScript)
            middle.after = [upstream]
            let middleID = try await console.q.queue.enqueue(middle).id
            var last = NewJob(kind: .drillNoop)
            last.after = [middleID]
            let lastID = try await console.q.queue.enqueue(last).id
            let (session, _) = try await console.login(console.readToken)
            let page = try await console.get("/console/jobs/\(middleID)", session: session).body
            #expect(page.contains("Waiting on \(upstream)"))
            #expect(page.contains("<ul class=\"dependencies\" id=\"runs-after\"><li><a href=\"/console/jobs/\(upstream)\">#\(upstream)</a> drill.noop <span class=\"state available\">available</span></li></ul>"))
            #expect(page.contains("<ul class=\"dependencies\" id=\"runs-before\"><li><a href=\"/console/jobs/\(lastID)\">#\(lastID)</a> drill.noop <span class=\"state waiting\">waiting</span></li></ul>"))
            let plain = try await console.get("/console/jobs/\(dead[0])", session: session).body
            #expect(!plain.contains("Runs after") && !plain.contains("Runs before"))
        }
    }

    @Test func aRevokedTokenEndsItsSessions() async throws {
        try await Self.withConsole { console in
            let (session, _) = try await console.login(console.readToken)
            #expect(try await console.get("/console/workers", session: session).status == 200)
            try await AccessTokenStore(pool: console.q.pool).revoke(name: "viewer")
            try await console.tokens.load()
            #expect(try await console.get("/console/workers", session: session).status == 303)
        }
    }

    @Test func theConsoleIsOffUnlessAskedFor() async throws {
        try await Self.withConsole(enabled: false) { console in
            for path in ["/console", "/console/login", "/console/static/console.js"] {
                let status = try await console.get(path).status
                #expect(status == 404, "\(path)")
            }
        }
        #expect(try ConsoleSettings.load(from: [:]).enabled == false)
        #expect(try ConsoleSettings.load(from: ["FLEET_CONSOLE": "on"]).enabled == true)
        #expect(try ConsoleSettings.load(from: ["FLEET_CONSOLE_SESSION_MINUTES": "30"]).sessionLifetime == .seconds(1800))
        #expect(throws: ConfigurationError.self) { try ConsoleSettings.load(from: ["FLEET_CONSOLE": "yes"]) }
    }
}
