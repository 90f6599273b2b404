/// SQL for migrations of other modules whose triggers enqueue jobs: the queue's table is named
/// here, by its owner, and the notification channel comes from `QueueChannel`.
public enum JobTriggers {
    /// `CREATE [OR REPLACE] FUNCTION name()`: a PL/pgSQL trigger function that enqueues one job
    /// of `kind` for the row that fired it (once per `idempotencyKey`, an expression over `NEW`)
    /// and wakes the kind's workers, in the transaction that fired it. `payload` is a jsonb
    /// expression; its lines after the first are indented for the function's body (8 spaces).
    /// `traceParent`: an expression for the job's `trace_parent`, or nil for none.
    public static func enqueueFunction(
        _ name: String, replacing: Bool, kind: JobKind, payload: String, priority: Int, maxAttempts: Int, idempotencyKey: String,
        traceParent: String?
    ) -> String {
        let traceColumn = traceParent == nil ? "" : ", trace_parent"
        let traceValue = traceParent.map { ", \($0)" } ?? ""
        return """
            CREATE \(replacing ? "OR REPLACE " : "")FUNCTION \(name)() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO jobs (kind, payload, priority, max_attempts, idempotency_key\(traceColumn))
                VALUES ('\(kind.rawValue)', \(payload),
                    \(priority), \(maxAttempts), \(idempotencyKey)\(traceValue))
                ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
                PERFORM \(QueueChannel.jobs.notifySQL(payload: "'\(kind.rawValue)'"));
                RETURN NULL;
            END $$;
            """
    }

    /// A migration's work left to do: one job of `kind` per row of the query `rows` (columns
    /// `payload` jsonb and `idempotency_key` text), once per key, and a wake-up of the kind's
    /// workers.
    public static func enqueueEach(kind: JobKind, from rows: String) -> String {
        """
        INSERT INTO jobs (kind, payload, idempotency_key)
        SELECT '\(kind.rawValue)', payload, idempotency_key FROM (\(rows)) AS work
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
        SELECT \(QueueChannel.jobs.notifySQL(payload: "'\(kind.rawValue)'"));
        """
    }

    /// When the last job of `kind` whose payload's `field` is the text expression `value`
    /// completed; NULL when none did (or its row was pruned).
    public static func lastCompleted(kind: JobKind, payloadField field: String, equals value: String) -> String {
        "(SELECT max(finished_at) FROM jobs WHERE kind = '\(kind.rawValue)' AND state = 'completed' AND payload->>'\(field)' = \(value))"
    }

    /// The `trace_parent` of the job whose id is the expression `jobID`.
    public static func traceParent(ofJob jobID: String) -> String { "(SELECT trace_parent FROM jobs WHERE id = \(jobID))" }
}
