/// Waits until `condition` holds, polling it; fails the test after `timeout`, which only guards
/// against a hang (a loaded machine may take long: the test waits for the state, not a time).
func waitFor(_ what: String, timeout: Duration = .seconds(60), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while !(try await condition()) {
        guard ContinuousClock.now < deadline else { throw TestFailure("timed out waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}
