/// Runs `body` every `interval` (±10 % jitter, so processes do not synchronise) until cancelled.
public func repeatEvery(_ interval: Duration, _ body: @Sendable () async -> Void) async {
    while !Task.isCancelled {
        do { try await Task.sleep(for: interval * Double.random(in: 0.9...1.1)) } catch { return }
        await body()
    }
}
