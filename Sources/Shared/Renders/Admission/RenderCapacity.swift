import FleetPostgres
import FleetQueue
import Foundation
import Providers

/// Renders within the providers' capacity (docs/product.md, "Provider capacity": the fleet
/// never sends a provider more than its share; one user's burst never starves another's render).
///
/// Each `render.run` job carries two limit keys: its provider's (`provider:fal-fashn`) and its
/// requester's (`user:u1`, or the onboarding token's id). The queue's fleet-wide limits
/// (`ConcurrencyLimit`, `docs/queue.md`) hold the jobs to them whatever the number of workers.
/// Before a render is accepted, `RenderAdmission` estimates when it would start (`retryAfter`)
/// and refuses it with `RENDER_BUSY` when it could not finish within its deadline, instead of
/// letting it time out.
public struct RenderCapacity: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    /// What a provider's limit key starts with; SQL that builds the key appends the provider.
    public static let providerKeyPrefix = "provider:"
    public static func providerKey(_ provider: String) -> String { providerKeyPrefix + provider }
    /// A user's id, or an onboarding token's (`eph-…`): a user who happened to have that id
    /// would share the token's limit, never its renders.
    public static func requesterKey(_ requester: String) -> String { "user:\(requester)" }
    public static let perRequesterRule = "user:*"

    static func limitKeys(provider: String, requester: String) -> [String] {
        [providerKey(provider), requesterKey(requester)]
    }

    /// The limits a new fleet starts with; `seedDefaults` writes those not already set, so an
    /// operator's change survives restarts: each provider's `registration.defaultLimit` (in its
    /// file under `Providers/`), then the per-requester rule. The reasons, provider by provider:
    /// - fal (FASHN, Nano Banana Pro): an account runs so many requests at once and queues the
    ///   rest on fal's side, where the wait counts against our 30 s; 40 is a paid account's share.
    /// - Google Vertex AI Virtual Try-On: 50 online prediction requests per minute per base
    ///   model (regional quota; 429 `RESOURCE_EXHAUSTED` beyond), and about 10 s each.
    /// - `local` (offline): no provider behind it; unlimited.
    public static func defaultLimits(perRequester: Int) -> [ConcurrencyLimit] {
        TryOnProviders.registered.compactMap { provider in
            provider.defaultLimit.map { ConcurrencyLimit(key: providerKey(provider.name), maxRunning: $0.maxRunning, rate: $0.rate, rateWindow: $0.rateWindow) }
        } + [ConcurrencyLimit(key: perRequesterRule, maxRunning: perRequester)]
    }

    public func seedDefaults(perRequester: Int) async throws {
        let limits = ConcurrencyLimits(executor: pool)
        for limit in Self.defaultLimits(perRequester: perRequester) {
            try await limits.seed(limit, by: "fleet-defaults")
        }
    }

    /// A render's run time before its provider has any on record (submit, wait, download).
    static func assumedLatency(_ provider: String) -> Duration {
        TryOnProviders.assumedLatency(provider)
    }

    /// nil when a new render would start in time; otherwise in how many seconds to ask again.
    /// The running renders free their slots as `ProviderSlots` says (`inFlight`: their ages and
    /// deadlines), the renders ahead of it (`waiting`: due, or waiting for their own inputs; the
    /// `resumed` first, then fresh ones of `latency` each) take them in turn, and starts are held
    /// within the rate's window; its inputs are made meanwhile (`inputWait`), so it starts at the
    /// later of the two, and must start by `deadline − deadline/6 − latency`.
    static func retryAfter(
        load: LimitLoad, inFlight: RendersInFlight = RendersInFlight(), latency: Duration, inputWait: Duration = .zero, deadline: Duration
    ) -> Int? {
        guard load.rule != nil || inputWait > .zero else { return nil }
        let position = load.waiting + 1
        var wait = inputWait
        if let maxRunning = load.rule?.maxRunning {
            guard maxRunning > 0 else { return Int(deadline.seconds.rounded(.up)) }
            var slots = ProviderSlots(maxRunning: maxRunning, running: load.running, clocks: inFlight.running, latency: latency)
            let resumed = inFlight.resumed.prefix(load.waiting)
            for render in resumed { slots.seat(render) }
            // The fresh renders ahead run their mean each. Their deadlines are not read; asked
            // before this one, each ends by this one's deadline: one whose slot comes later times
            // out without taking it.
            let fresh = RenderClock(age: nil, untilDeadline: deadline)
            for _ in 0..<(load.waiting - resumed.count) { slots.seat(fresh) }
            wait = max(wait, slots.soonest ?? .zero)
        }
        if let rule = load.rule, let rate = rule.effectiveRate {
            guard rate > 0 else { return Int(rule.rateWindow.seconds.rounded(.up)) }
            let left = max(0, rate - load.startedInWindow)
            if position > left {
                let windows = (position - left + rate - 1) / rate
                wait = max(wait, rule.rateWindow * windows)
            }
        }
        // A margin of a sixth of the deadline for what the estimate does not see: slots turning
        // over later than the mean, the claim and the download.
        let latest = deadline - deadline / 6 - latency
        guard wait > latest else { return nil }
        return max(1, Int((wait - latest).seconds.rounded(.up)))
    }

    /// The provider said 429: its rate is halved fleet-wide for a while (`ConcurrencyLimit.Throttle`).
    /// Returns the rate now in force (nil: no rule limits the provider).
    public func throttle(provider: String) async throws -> Int? {
        try await ConcurrencyLimits(executor: pool).throttle(key: Self.providerKey(provider))?.effectiveRate
    }

    /// Folds completed renders' run times, oldest first, into their provider's mean, each with
    /// weight 1/5 (a provider slowing down shows within a few renders), in one statement for
    /// the batch (`ProviderLatencySamples`: each render worker at most once a second). Every
    /// worker updates the provider's one row, so the writers queue on it: the commit does not
    /// wait for the disk (a sample lost in a crash changes an estimate, nothing else). Flushed,
    /// it held render completions in line behind fsync (render overhead at 500 in flight,
    /// docs/benchmarks-history.md, "Against the previous main again, after limits, capacity and
    /// callbacks").
    public func recordLatencies(provider: String, _ samples: [Duration]) async throws {
        guard let first = samples.first?.seconds else { return }
        let newest = 0.2
        // For a row on record: seconds × decay + contribution. A first row starts from the first
        // sample, as if it had been on record with that value.
        let contribution = samples.reduce(0.0) { $0 * (1 - newest) + $1.seconds * newest }
        let decay = pow(1 - newest, Double(samples.count))
        let firstRow = first * decay + contribution
        try await pool.query("""
            INSERT INTO provider_latency (provider, seconds, samples)
            SELECT $1::text, $2::float8, $3::bigint FROM (SELECT set_config('synchronous_commit', 'off', true)) AS no_flush_wait
            ON CONFLICT (provider) DO UPDATE SET seconds = provider_latency.seconds * $4::float8 + $5::float8,
                samples = provider_latency.samples + EXCLUDED.samples, updated_at = now()
            """, [provider, firstRow, samples.count, decay, contribution])
    }
}
