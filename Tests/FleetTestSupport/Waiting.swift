/// Waits until `condition` holds, polling it; fails the test after `timeout`, which only guards
/// against a hang (a loaded machine may take long: the test waits for the state, not a time).
func waitFor(_ what: String, timeout: Duration = .seconds(60), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while !(try await condition()) {
        guard ContinuousClock.now < deadline else { throw TestFailure("timed out waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(20))
    }
}

/// Runs `body`, failing the test if it has not finished after `limit` (a hung request).
func withDeadline(_ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> Void) async throws {
    try await withThrowingTaskGroup(of: Bool.self) { group in
        group.addTask { try await body(); return true }
        group.addTask { try await Task.sleep(for: limit); return false }
        let finished = try await group.next() ?? false
        group.cancelAll()
        if !finished { throw TestFailure("\(what) did not finish within \(limit)") }
    }
}
