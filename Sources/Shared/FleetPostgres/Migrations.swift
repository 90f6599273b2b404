/// One versioned step of the schema. Versions only grow; a released step is never edited.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    public let sql: String
}

/// Every migration of the fleet, in order. `docs/schema.md` describes the result.
public enum Migrations {
    public static let all: [Migration] = [
        jobQueue, rendersAndCredits, scheduleSlots, jobControl, concurrencyLimits, providerLatency, completionCallbacks, consoleSessions,
        consoleIndexes, jobTraces, renderCallbackTraces, workerLocks,
    ]

    static let jobQueue = Migration(version: 1, name: "job queue", sql: """
        CREATE TYPE job_state AS ENUM ('available', 'running', 'completed', 'dead', 'cancelled');

        CREATE TABLE jobs (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            kind text NOT NULL,
            queue text NOT NULL DEFAULT 'default',
            state job_state NOT NULL DEFAULT 'available',
            priority smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 9),
            attempt integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
            run_at timestamptz NOT NULL DEFAULT now(),
            payload jsonb NOT NULL DEFAULT '{}',
            result jsonb,
            errors jsonb NOT NULL DEFAULT '[]',
            idempotency_key text,
            lease_owner text,
            lease_expires_at timestamptz,
            cancel_requested_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(),
            started_at timestamptz,
            finished_at timestamptz,
            -- A lease exactly while running: "lease_owner = me" alone proves the job is running.
            CONSTRAINT jobs_lease_iff_running CHECK ((state = 'running') = (lease_owner IS NOT NULL))
        ) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_cost_delay = 0);

        -- The claim reads only this partial index: finished rows never slow it down.
        CREATE INDEX jobs_claim_idx ON jobs (kind, priority, run_at, id) WHERE state = 'available';
        -- The rescuer finds expired leases here.
        CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE state = 'running';
        -- Enqueueing a key twice returns the first job.
        CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

        CREATE TABLE workers (
            id text PRIMARY KEY,
            host text NOT NULL,
            pid integer NOT NULL,
            executable text NOT NULL,
            kinds text[] NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            last_heartbeat_at timestamptz NOT NULL DEFAULT now(),
            stopped_at timestamptz
        );
        """)

    /// The backend's `credits` and `subscriptions` (as PRODUCT.md describes them), and the
    /// fleet's renders, credit reservations and ledger, ephemeral tokens, provider events and
    /// run-time settings.
    static let rendersAndCredits = Migration(version: 2, name: "renders and credits", sql: """
        CREATE TABLE subscriptions (
            id text PRIMARY KEY DEFAULT gen_random_uuid()::text,
            user_id text NOT NULL,
            apple_transaction_id text,
            status text NOT NULL CHECK (status IN ('trial', 'subscribed', 'expired', 'cancelled')),
            started_at timestamptz,
            expires_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX subscriptions_user_idx ON subscriptions (user_id);

        CREATE TABLE credits (
            id text PRIMARY KEY DEFAULT gen_random_uuid()::text,
            user_id text NOT NULL UNIQUE,
            total_granted integer NOT NULL DEFAULT 0 CHECK (total_granted >= 0),
            total_consumed integer NOT NULL DEFAULT 0 CHECK (total_consumed >= 0),
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );

        CREATE TABLE ephemeral_tokens (
            id text PRIMARY KEY,
            token_hash bytea NOT NULL UNIQUE,
            expires_at timestamptz NOT NULL,
            linked_user_id text,
            linked_at timestamptz,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX ephemeral_tokens_expiry_idx ON ephemeral_tokens (expires_at) WHERE linked_user_id IS NULL;

        CREATE TYPE render_status AS ENUM ('pending', 'processing', 'complete', 'failed');

        CREATE TABLE renders (
            id text PRIMARY KEY,
            user_id text,
            -- Set while an unlinked ephemeral token owns the render; cleared when it is linked.
            ephemeral_token_id text REFERENCES ephemeral_tokens (id) ON DELETE CASCADE,
            -- The storage tree the images are read from and the result is written to.
            owner_id text NOT NULL,
            garment_id text NOT NULL,
            body_photo_id text NOT NULL,
            category text NOT NULL,
            provider text NOT NULL,
            status render_status NOT NULL DEFAULT 'pending',
            job_id bigint,
            provider_job_id text,
            provider_submission jsonb,
            result_path text,
            error_code text,
            -- Whether a credit was reserved (non-subscribers), so settlement knows to touch credits.
            charged boolean NOT NULL DEFAULT false,
            deadline_at timestamptz NOT NULL,
            feedback text CHECK (feedback IN ('up', 'down')),
            feedback_category text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT renders_owned CHECK (user_id IS NOT NULL OR ephemeral_token_id IS NOT NULL),
            CONSTRAINT renders_error_iff_failed CHECK ((status = 'failed') = (error_code IS NOT NULL))
        );
        CREATE INDEX renders_user_idx ON renders (user_id, created_at DESC);
        CREATE INDEX renders_open_idx ON renders (deadline_at) WHERE status IN ('pending', 'processing');
        CREATE UNIQUE INDEX renders_provider_job_idx ON renders (provider, provider_job_id) WHERE provider_job_id IS NOT NULL;
        -- One onboarding render per ephemeral token.
        CREATE UNIQUE INDEX renders_one_per_token_idx ON renders (ephemeral_token_id) WHERE ephemeral_token_id IS NOT NULL;

        -- A credit held by an unfinished render; settlement deletes it, so it can happen once.
        CREATE TABLE credit_reservations (
            render_id text PRIMARY KEY,
            user_id text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX credit_reservations_user_idx ON credit_reservations (user_id);

        -- Append-only; the key makes each settlement of each render (or grant) happen once.
        CREATE TABLE credit_ledger (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            key text NOT NULL UNIQUE,
            user_id text NOT NULL,
            render_id text,
            entry text NOT NULL CHECK (entry IN ('grant', 'reserve', 'consume', 'release', 'refund')),
            amount integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX credit_ledger_user_idx ON credit_ledger (user_id, created_at);

        -- Provider callbacks (fal webhooks) as received by the dispatcher, once per request id.
        CREATE TABLE provider_events (
            provider text NOT NULL,
            request_id text NOT NULL,
            payload jsonb NOT NULL,
            received_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (provider, request_id)
        );

        -- Settings that change without a deploy: the render provider, the enabled categories.
        CREATE TABLE fleet_settings (
            key text PRIMARY KEY,
            value jsonb NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        INSERT INTO fleet_settings (key, value) VALUES
            ('render.provider', '"local"'),
            ('render.categories', '["tops", "bottoms", "dresses", "shoes", "outerwear"]');
        """)

    /// One row per schedule slot a dispatcher claimed: the primary key makes each slot of each
    /// entry run once however many dispatchers race for it (`docs/schedule.md`).
    static let scheduleSlots = Migration(version: 3, name: "schedule slots", sql: """
        CREATE TABLE schedule_slots (
            entry text NOT NULL,
            slot_at timestamptz NOT NULL,
            claimed_by text NOT NULL,
            claimed_at timestamptz NOT NULL DEFAULT now(),
            -- The job a job-kind entry enqueued, in the claim's transaction.
            job_id bigint,
            -- When a built-in task ended, and its error if it failed.
            finished_at timestamptz,
            error text,
            PRIMARY KEY (entry, slot_at)
        );
        -- Old slots are pruned by age, whatever their entry.
        CREATE INDEX schedule_slots_slot_at_idx ON schedule_slots (slot_at);
        """)

    /// Operators' job control and scoped access (`docs/schema.md`): pauses the claim honours,
    /// the audit trail, named access tokens with roles, and the indexes `jobs.list` pages on.
    static let jobControl = Migration(version: 4, name: "job control", sql: """
        CREATE TABLE queue_pauses (
            scope text NOT NULL CHECK (scope IN ('kind', 'queue')),
            name text NOT NULL,
            paused_by text NOT NULL,
            paused_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (scope, name)
        );

        CREATE TABLE operator_audit (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            -- The access token's name, or unix-socket.
            actor text NOT NULL,
            action text NOT NULL,
            -- The job id, the filter or the paused target.
            target jsonb NOT NULL,
            affected bigint NOT NULL
        );

        CREATE TABLE access_tokens (
            name text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9._-]{1,64}$'),
            role text NOT NULL CHECK (role IN ('submit', 'operate', 'read')),
            -- BLAKE2b-256 of the token: the token itself is shown once, when created, and never stored.
            token_hash bytea NOT NULL UNIQUE,
            created_at timestamptz NOT NULL DEFAULT now(),
            revoked_at timestamptz
        );

        -- jobs.list pages, newest first, over the jobs operators look for: the dead and cancelled
        -- ones, by state, by state and kind, and dead ones by their last error's code. Partial
        -- indexes that only a failure writes: enqueue, claim and completion never touch them.
        -- (Queued, running and completed jobs are paged by walking the primary key backwards:
        -- they are recent or dense.)
        CREATE INDEX jobs_failed_idx ON jobs (state, id) WHERE state IN ('dead', 'cancelled');
        CREATE INDEX jobs_failed_kind_idx ON jobs (state, kind, id) WHERE state IN ('dead', 'cancelled');
        CREATE INDEX jobs_dead_code_idx ON jobs ((errors -> -1 ->> 'code'), id) WHERE state = 'dead';
        """)

    /// Fleet-wide limits on jobs that carry limit keys (`docs/queue.md`, "Limits"): at most so many
    /// running at once and/or so many starts per window, per key, enforced by the claim.
    static let concurrencyLimits = Migration(version: 5, name: "concurrency limits", sql: """
        -- NULL for jobs without keys (no rewrite of the table: a column without a default).
        ALTER TABLE jobs ADD COLUMN limit_keys text[];

        -- The running jobs that count against a limit: what the limited claim counts.
        CREATE INDEX jobs_running_limited_idx ON jobs (limit_keys) WHERE state = 'running' AND limit_keys IS NOT NULL;

        -- One rule per key (`provider:fal-fashn`), or per key prefix ending in `*` (`user:*`: each
        -- key under it has the limit on its own). Rows, so operators change them at run time.
        CREATE TABLE queue_limits (
            key text PRIMARY KEY CHECK (key ~ '^[A-Za-z0-9._:-]{1,100}[*]?$'),
            max_running integer CHECK (max_running >= 0),
            rate integer CHECK (rate >= 0),
            rate_window_seconds double precision NOT NULL DEFAULT 60 CHECK (rate_window_seconds > 0 AND rate_window_seconds <= 3600),
            updated_by text NOT NULL DEFAULT 'fleet',
            updated_at timestamptz NOT NULL DEFAULT now(),
            -- Lowered after the provider said 429: the rate was halved from `throttled_from` at
            -- `throttled_at` and climbs back by a tenth of it every 30 s (ConcurrencyLimit.effectiveRate).
            throttled_rate integer CHECK (throttled_rate >= 1),
            throttled_from integer,
            throttled_at timestamptz,
            CHECK (max_running IS NOT NULL OR rate IS NOT NULL)
        );

        -- Starts of jobs whose keys have a rule, for rates over a sliding window (and the rate a
        -- throttle halves); the claim deletes what no window can see any more.
        CREATE TABLE limit_starts (
            key text NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX limit_starts_key_idx ON limit_starts (key, started_at);
        """)

    /// Each render provider's recent latency (an exponentially weighted mean of its renders'
    /// run times), for the dispatcher's admission control (`RENDER_BUSY`).
    static let providerLatency = Migration(version: 6, name: "provider latency", sql: """
        CREATE TABLE provider_latency (
            provider text PRIMARY KEY,
            seconds double precision NOT NULL CHECK (seconds >= 0),
            samples bigint NOT NULL DEFAULT 1,
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        """)

    /// Completion callbacks: a job or render given a `callbackUrl` gets a `callback.deliver` job
    /// from the database itself, in the transaction that ends it, whoever ends it (a worker's
    /// outcome, a cancel, the rescuer, the sweeps, the render timeout): nothing can end without
    /// its callback, and a kill -9 loses neither. The idempotency key makes it one per ending.
    static let completionCallbacks = Migration(version: 7, name: "completion callbacks", sql: """
        ALTER TABLE jobs ADD COLUMN callback_url text;
        ALTER TABLE renders ADD COLUMN callback_url text;

        CREATE FUNCTION fleet_wire_time(at timestamptz) RETURNS text LANGUAGE sql STABLE
            RETURN to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');

        CREATE FUNCTION jobs_enqueue_callback() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO jobs (kind, payload, priority, max_attempts, idempotency_key)
            VALUES ('callback.deliver', jsonb_build_object(
                'url', NEW.callback_url,
                'webhookId', 'msg_cb_job_' || NEW.id || '_' || NEW.attempt,
                'event', jsonb_build_object(
                    'type', 'job.finished', 'jobId', NEW.id, 'kind', NEW.kind, 'state', NEW.state, 'attempt', NEW.attempt,
                    'errorCode', CASE WHEN NEW.state = 'completed' THEN NULL ELSE NEW.errors -> -1 ->> 'code' END,
                    'result', NEW.result,
                    'createdAt', fleet_wire_time(NEW.created_at),
                    'finishedAt', fleet_wire_time(coalesce(NEW.finished_at, now())))),
                1, 12, 'callback:job:' || NEW.id || ':' || NEW.attempt)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
            PERFORM pg_notify('fleet_jobs', 'callback.deliver');
            RETURN NULL;
        END $$;
        -- Rows without a callback_url pay only this WHEN test.
        CREATE TRIGGER jobs_callback AFTER UPDATE OF state ON jobs FOR EACH ROW
            WHEN (NEW.callback_url IS NOT NULL AND NEW.state IN ('completed', 'dead', 'cancelled')
                  AND OLD.state IN ('available', 'running'))
            EXECUTE FUNCTION jobs_enqueue_callback();

        CREATE FUNCTION renders_enqueue_callback() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO jobs (kind, payload, priority, max_attempts, idempotency_key)
            VALUES ('callback.deliver', jsonb_build_object(
                'url', NEW.callback_url,
                'webhookId', 'msg_cb_render_' || NEW.id,
                'event', jsonb_build_object(
                    'type', 'render.finished', 'renderId', NEW.id, 'userId', NEW.user_id, 'status', NEW.status,
                    'errorCode', NEW.error_code, 'resultPath', NEW.result_path,
                    'createdAt', fleet_wire_time(NEW.created_at), 'finishedAt', fleet_wire_time(now()))),
                1, 12, 'callback:render:' || NEW.id)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
            PERFORM pg_notify('fleet_jobs', 'callback.deliver');
            RETURN NULL;
        END $$;
        CREATE TRIGGER renders_callback AFTER UPDATE OF status ON renders FOR EACH ROW
            WHEN (NEW.callback_url IS NOT NULL AND NEW.status IN ('complete', 'failed') AND OLD.status IN ('pending', 'processing'))
            EXECUTE FUNCTION renders_enqueue_callback();
        """)

    /// The operator console's sessions (`docs/console.md`): a row per login, keyed by the digest of
    /// the cookie's secret, so every dispatcher behind a load balancer knows every session and a
    /// logout ends it everywhere.
    static let consoleSessions = Migration(version: 8, name: "console sessions", sql: """
        CREATE TABLE console_sessions (
            secret_hash bytea PRIMARY KEY,
            token_name text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL
        );
        CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);
        """)

    /// What the console counts over many jobs, readable from indexes alone. The code of a job's
    /// newest error, kept beside `errors` by every statement that appends one, so the dead-job
    /// groups and the `errorCode` filter read an index of dead jobs, never each dead job's `errors`
    /// from the heap (188 ms for 60,000 dead jobs; 28 ms this way). Retried jobs waiting to run
    /// get a partial index of their own, which only a retry writes: the overview counts them
    /// without reading every queued job's `attempt` from the heap.
    static let consoleIndexes = Migration(version: 9, name: "console indexes", sql: """
        ALTER TABLE jobs ADD COLUMN last_error_code text;
        UPDATE jobs SET last_error_code = errors -> -1 ->> 'code' WHERE jsonb_array_length(errors) > 0;
        DROP INDEX jobs_dead_code_idx;
        CREATE INDEX jobs_dead_code_idx ON jobs (last_error_code, id) WHERE state = 'dead';
        CREATE INDEX jobs_dead_groups_idx ON jobs (kind, last_error_code, finished_at, id) WHERE state = 'dead';
        CREATE INDEX jobs_retrying_idx ON jobs (kind) WHERE state = 'available' AND attempt > 0;
        """)

    /// The W3C traceparent of the span that enqueued a job (`docs/operations.md`, "Traces"), so
    /// the worker that claims it continues the trace; NULL when tracing was off. A nullable
    /// column without a default is added to the catalogue only: no rewrite of the table. A job's
    /// completion callback (migration 7's trigger, otherwise unchanged) joins the job's trace.
    static let jobTraces = Migration(version: 10, name: "job traces", sql: """
        ALTER TABLE jobs ADD COLUMN trace_parent text;

        CREATE OR REPLACE FUNCTION jobs_enqueue_callback() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO jobs (kind, payload, priority, max_attempts, idempotency_key, trace_parent)
            VALUES ('callback.deliver', jsonb_build_object(
                'url', NEW.callback_url,
                'webhookId', 'msg_cb_job_' || NEW.id || '_' || NEW.attempt,
                'event', jsonb_build_object(
                    'type', 'job.finished', 'jobId', NEW.id, 'kind', NEW.kind, 'state', NEW.state, 'attempt', NEW.attempt,
                    'errorCode', CASE WHEN NEW.state = 'completed' THEN NULL ELSE NEW.errors -> -1 ->> 'code' END,
                    'result', NEW.result,
                    'createdAt', fleet_wire_time(NEW.created_at),
                    'finishedAt', fleet_wire_time(coalesce(NEW.finished_at, now())))),
                1, 12, 'callback:job:' || NEW.id || ':' || NEW.attempt, NEW.trace_parent)
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
            PERFORM pg_notify('fleet_jobs', 'callback.deliver');
            RETURN NULL;
        END $$;
        """)

    /// A render's callback continues the render's trace: the render keeps none of its own, but its
    /// `render.run` job does (migration 10), and every render has one from its request on.
    static let renderCallbackTraces = Migration(version: 11, name: "render callback traces", sql: """
        CREATE OR REPLACE FUNCTION renders_enqueue_callback() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO jobs (kind, payload, priority, max_attempts, idempotency_key, trace_parent)
            VALUES ('callback.deliver', jsonb_build_object(
                'url', NEW.callback_url,
                'webhookId', 'msg_cb_render_' || NEW.id,
                'event', jsonb_build_object(
                    'type', 'render.finished', 'renderId', NEW.id, 'userId', NEW.user_id, 'status', NEW.status,
                    'errorCode', NEW.error_code, 'resultPath', NEW.result_path,
                    'createdAt', fleet_wire_time(NEW.created_at), 'finishedAt', fleet_wire_time(now()))),
                1, 12, 'callback:render:' || NEW.id, (SELECT trace_parent FROM jobs WHERE id = NEW.job_id))
            ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
            PERFORM pg_notify('fleet_jobs', 'callback.deliver');
            RETURN NULL;
        END $$;
        """)

    /// Version 13 (12 is another change's; the migrator applies whatever versions are missing, in
    /// order, so a gap is fine). A worker found dead in about a second instead of after its
    /// leases: each worker process holds a session-level advisory lock on its LISTEN connection,
    /// which the server releases the moment that session ends, and the dispatcher's reaper takes
    /// back the jobs of a worker whose lock is free (`WorkerLock`, `docs/operations.md`, "When a
    /// worker dies"). A free lock proves the death only on the server run the lock was taken on:
    /// a restart or a failover ends every session while the workers live on. So the row records
    /// that run (`pg_postmaster_start_time()` when the lock was taken), and the reaper probes only
    /// rows of the current run; the others wait for their worker to lock again, or for their
    /// leases. NULL: no lock taken (an older worker, or an id hashing like another's). A nullable
    /// column without a default: catalogue only, no rewrite. The index holds the few rows the
    /// reaper probes every second (live, locked), however many stopped rows accumulate.
    static let workerLocks = Migration(version: 13, name: "worker locks", sql: """
        ALTER TABLE workers ADD COLUMN lock_server_start timestamptz;
        CREATE INDEX workers_locked_idx ON workers (lock_server_start) WHERE stopped_at IS NULL;
        """)
}
