@testable import DispatcherCore
@testable import FleetAccess
import DispatcherProtocol
import FleetPostgres
import FleetSchema
import FleetSupport
@testable import FleetTestSupport
import Foundation
import Testing

/// The console against a real `dispatcher` process over real HTTP: who a session is, login forms
/// only the server issues, the security headers on every answer, and POSTs from other origins.
@Suite(.serialized) struct ConsoleHardeningTests {
    struct Console: ConsoleClient {
        let port: Int
        let url: String
        let pool: PostgresPool
    }

    /// A dispatcher with the console on, over a database `prepare` may fill before it starts
    /// (and migrates) it; `prepare` gets the database, migrated up to `schemaVersion`.
    static func withDispatcher(
        schemaVersion: Int = .max, prepare: (PostgresPool) async throws -> Void = { _ in }, _ body: (Console, DispatcherProcess) async throws -> Void
    ) async throws {
        let url = try await PostgresCluster.shared.makeEmptyDatabase()
        try await Migrator(migrations: FleetSchema.migrations.filter { $0.version <= schemaVersion }, logger: testLogger).migrate(conninfo: url)
        let pool = PostgresPool(conninfo: url, maxConnections: 2)
        try await prepare(pool)
        let dispatcher = try DispatcherProcess(databaseURL: url, environment: ["FLEET_CONSOLE": "on", "FLEET_DISPATCHER_SOCKET": "off"])
        try await dispatcher.start()
        do {
            try await body(Console(port: dispatcher.httpPort, url: url, pool: pool), dispatcher)
        } catch {
            await dispatcher.kill()
            throw error
        }
        await dispatcher.kill()
    }

    static func pausedBy(_ pool: PostgresPool, kind: String) async throws -> String? {
        try await pool.query("SELECT paused_by FROM queue_pauses WHERE scope = 'kind' AND name = $1", [kind]).rows.first?["paused_by"]
    }

    /// A `read` token created as `default` before the name was reserved answered as the
    /// environment's `operate` token in the console. The upgrade renames it: it keeps working, as
    /// what it is, and can do nothing an operator can; sessions of the old schema end.
    @Test func aReadTokenOnceNamedDefaultStaysReadAfterTheUpgrade() async throws {
        let readToken = "wbt_" + String(repeating: "7", count: 64)
        let oldSession = String(repeating: "a", count: 64)
        try await Self.withDispatcher(schemaVersion: 11, prepare: { pool in
            try await pool.query("INSERT INTO access_tokens (name, role, token_hash) VALUES ('default', 'read', decode($1, 'hex'))",
                                 [AccessTokens.digest(readToken).hexString])
            try await pool.query("""
                INSERT INTO console_sessions (secret_hash, token_name, expires_at) VALUES (decode($1, 'hex'), 'default', now() + interval '1 hour')
                """, [AccessTokens.digest(oldSession).hexString])
        }) { console, dispatcher in
            let store = AccessTokenStore(pool: console.pool)
            let renamed = try #require(try await store.list().first { $0.renamedFrom == "default" })
            #expect(renamed.name.hasPrefix("default.renamed-") && renamed.role == .read && renamed.revokedAt == nil)

            // The session made under the old schema is gone; a new login shows the token as it is.
            #expect(try await console.get("/console", session: oldSession).status == 303)
            let (session, _) = try await console.login(readToken)
            let page = try await console.get("/console/queues", session: session)
            #expect(page.body.contains("\(renamed.name) <em>(read)</em>"))
            #expect(!page.body.contains("(operate)"))
            let refused = try await console.post("/console/queues/pause", session: session, form: ["csrf": try await console.csrf(session), "kind": "drill.noop"])
            #expect(refused.status == 403)
            #expect(try await Self.pausedBy(console.pool, kind: "drill.noop") == nil)

            // Over the socket too it is a read token under its new name.
            let client = try await DispatcherClient.connect(to: dispatcher.address, token: readToken, reconnect: .disabled)
            await #expect(throws: DispatcherError.self) { _ = try await client.send(QueuePauseRequest(kind: "drill.noop", queue: nil)) }
            await client.close()

            // The reserved names cannot be given again, by the CLI's store or by SQL.
            for name in ["default", "unix-socket"] {
                await #expect(throws: AccessTokenStore.StoreError.reservedName(name)) { _ = try await store.create(name: name, role: .read) }
                await #expect(throws: PostgresError.self) {
                    try await console.pool.query("INSERT INTO access_tokens (name, role, token_hash) VALUES ($1, 'read', '\\x00')", [name])
                }
            }
        }
    }

    /// A session is its token: revoking the token ends its sessions on the refresh that drops it
    /// (every 2 s), the same refresh that refuses a new login with it.
    @Test func revokingATokenEndsItsSessionsWithinTheRefreshInterval() async throws {
        try await Self.withDispatcher { console, _ in
            let store = AccessTokenStore(pool: console.pool)
            let token = try await store.create(name: "night-shift", role: .operate)
            var session: String?
            try await waitFor("the dispatcher's refresh to read the new token") {
                session = try await console.attemptLogin(token).session
                return session != nil
            }
            #expect(try await console.get("/console/workers", session: session).status == 200)
            try await store.revoke(name: "night-shift")
            try await waitFor("the dispatcher's refresh to drop the revoked token") { try await console.attemptLogin(token).session == nil }
            #expect(try await console.get("/console/workers", session: session).status == 303, "the revoked token's session outlived its refresh")
        }
    }

    /// The login form's value must be one the server issued: a value the client picks (in the
    /// cookie and the form alike) is refused, and so is an issued one altered or expired.
    @Test func aLoginWithAFormValueTheServerDidNotIssueIsRefused() async throws {
        try await Self.withDispatcher { console, _ in
            let made = String(repeating: "ab", count: 32)
            let issued = try #require(try await console.get("/console/login").cookie(ConsoleRoutes.loginCookie)?.value)
            let lastDigit = issued.last == "0" ? "1" : "0"
            for value in [made, String(issued.dropLast()) + lastDigit, "1.\(String(repeating: "0", count: 32)).\(String(repeating: "0", count: 64))"] {
                let response = try await RawHTTP.send(port: console.port, "POST", "/console/login", cookies: [ConsoleRoutes.loginCookie: value],
                                                      form: ["csrf": value, "token": DispatcherProcess.token])
                #expect(response.status == 403, "\(value)")
                #expect(response.cookie(ConsoleRoutes.sessionCookie) == nil)
            }
            let accepted = try await RawHTTP.send(port: console.port, "POST", "/console/login", cookies: [ConsoleRoutes.loginCookie: issued],
                                                  form: ["csrf": issued, "token": DispatcherProcess.token])
            #expect(accepted.status == 303)

            // Signed by the fleet's key, so any dispatcher of the fleet accepts it; it expires.
            let forms = ConsoleLoginForms(pool: console.pool)
            #expect(try await forms.isValid(issued))
            #expect(try await !forms.isValid(issued, now: Date() + TimeInterval(ConsoleLoginForms.lifetime + 60)))
            #expect(try await !forms.isValid(try await forms.issue(now: Date() - TimeInterval(ConsoleLoginForms.lifetime + 60))))
        }
    }

    /// Every answer under /console carries the console's headers, the router's own 404 and the
    /// answer to a method a path does not take included; other paths are left alone.
    @Test func everyConsoleAnswerCarriesTheSecurityHeaders() async throws {
        try await Self.withDispatcher { console, _ in
            let answers = [
                try await console.get("/console/no-such-page"), try await console.get("/console/jobs/abc"),
                try await console.get("/console/static/none.js"), try await console.post("/console/workers", session: nil, form: [:]),
                try await console.get("/console/login"), try await console.get("/console"),
            ]
            #expect(answers.map(\.status) == [404, 303, 404, 404, 200, 303])
            for answer in answers {
                #expect(answer.header("Content-Security-Policy") == ConsoleRoutes.contentSecurityPolicy)
                #expect(answer.header("X-Frame-Options") == "DENY")
                #expect(answer.header("X-Content-Type-Options") == "nosniff")
                #expect(answer.header("Cache-Control") == "no-store")
                // Not `no-referrer`: a browser would send the console's own POSTs with `Origin: null`.
                #expect(answer.header("Referrer-Policy") == "same-origin")
            }
            #expect(try await console.get("/console/no-such-page").body.contains("Not Found"))
            #expect(try await console.get("/healthz").header("Content-Security-Policy") == nil)
        }
    }

    /// A POST whose Origin is not the console's is refused, its CSRF token valid or not; the
    /// console's own origin passes (a POST without Origin, no browser's cross-site form, passes
    /// in every other test).
    @Test func aCrossOriginPostIsRefusedEvenWithAValidCSRFToken() async throws {
        try await Self.withDispatcher { console, _ in
            let (session, _) = try await console.login(DispatcherProcess.token)
            let csrf = try await console.csrf(session)
            let own = "http://127.0.0.1:\(console.port)"
            let foreign: [[String: String]] = [
                ["Origin": "http://evil.example"], ["Origin": "http://127.0.0.1:\(console.port + 1)"], ["Origin": "null"],
                // A plain-HTTP page posting to the console a TLS proxy serves (a man in the middle).
                ["Origin": own, "X-Forwarded-Proto": "https"],
            ]
            for headers in foreign {
                let refused = try await console.post("/console/queues/pause", session: session, form: ["csrf": csrf, "kind": "drill.noop"],
                                                     headers: headers)
                #expect(refused.status == 403, "\(headers)")
                #expect(refused.body.contains("another site"))
            }
            #expect(try await Self.pausedBy(console.pool, kind: "drill.noop") == nil)

            // The login form too: another site cannot log a browser in.
            let form = try #require(try await console.get("/console/login").cookie(ConsoleRoutes.loginCookie)?.value)
            let login = try await RawHTTP.send(port: console.port, "POST", "/console/login", cookies: [ConsoleRoutes.loginCookie: form],
                                               form: ["csrf": form, "token": DispatcherProcess.token], headers: ["Origin": "http://evil.example"])
            #expect(login.status == 403 && login.cookie(ConsoleRoutes.sessionCookie) == nil)

            let sameOrigin = try await console.post("/console/queues/pause", session: session, form: ["csrf": csrf, "kind": "drill.noop"],
                                                    headers: ["Origin": own])
            #expect(sameOrigin.status == 200)
            #expect(try await Self.pausedBy(console.pool, kind: "drill.noop") == AccessTokens.defaultTokenName)
        }
    }
}
