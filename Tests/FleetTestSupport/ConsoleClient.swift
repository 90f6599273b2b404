@testable import DispatcherCore
@testable import FleetAccess
import Testing

/// A browser's side of the console on a port: pages, forms, a login as the login page asks for it.
protocol ConsoleClient: Sendable {
    var port: Int { get }
}

extension ConsoleClient {
    func get(_ path: String, session: String? = nil, headers: [String: String] = [:]) async throws -> RawHTTPResponse {
        try await RawHTTP.send(port: port, "GET", path, cookies: session.map { [ConsoleRoutes.sessionCookie: $0] } ?? [:], headers: headers)
    }

    func post(_ path: String, session: String?, form: [String: String], headers: [String: String] = [:]) async throws -> RawHTTPResponse {
        try await RawHTTP.send(port: port, "POST", path, cookies: session.map { [ConsoleRoutes.sessionCookie: $0] } ?? [:], form: form,
                               headers: headers)
    }

    /// Logs in as a browser does (the login form's CSRF value and its cookie); returns the session cookie's value.
    func login(_ token: String, headers: [String: String] = [:]) async throws -> (session: String, response: RawHTTPResponse) {
        let (session, response) = try await attemptLogin(token, headers: headers)
        return (try #require(session), response)
    }

    /// A login that may be refused: the session, or nil with the refusal.
    func attemptLogin(_ token: String, headers: [String: String] = [:]) async throws -> (session: String?, response: RawHTTPResponse) {
        let form = try await get("/console/login")
        let loginCSRF = try #require(form.cookie(ConsoleRoutes.loginCookie)?.value)
        let response = try await RawHTTP.send(port: port, "POST", "/console/login", cookies: [ConsoleRoutes.loginCookie: loginCSRF],
                                              form: ["csrf": loginCSRF, "token": token], headers: headers)
        return (response.cookie(ConsoleRoutes.sessionCookie)?.value, response)
    }

    /// The CSRF token a page of this session carries in its forms.
    func csrf(_ session: String) async throws -> String {
        let page = try await get("/console/queues", session: session).body
        let marker = "name=\"csrf\" value=\""
        let start = try #require(page.range(of: marker)).upperBound
        return String(page[start...].prefix { $0 != "\"" })
    }
}
