import FleetPostgres

extension RenderMigrations {
    /// The backend's `credits` and `subscriptions` (with the columns docs/product.md lists
    /// under "Credits"), and the fleet's renders, credit reservations and ledger, ephemeral
    /// tokens and provider events (the run-time settings of this version are `LiveSettings`' part).
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
        """)
}
