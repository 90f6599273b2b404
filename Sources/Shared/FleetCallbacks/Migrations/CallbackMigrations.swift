import FleetPostgres
import FleetQueue

/// The completion callbacks' migrations: a job given a `callbackUrl` gets a `callback.deliver`
/// job from the database itself, in the transaction that ends it (`docs/schema.md`).
public enum CallbackMigrations {
    public static let all = [completionCallbacks, jobCallbackTraces, dependentCallbacks]

    /// The kind its trigger enqueues, named here since the schema links none of FleetCallbacks'
    /// code: `SchemaUpgradeTests` checks it is `JobKind.callbackDeliver`.
    static let callbackKind: JobKind = "callback.deliver"

    /// The trigger function of version 7 and, carrying the job's trace, of version 10.
    static func jobCallbackFunction(replacing: Bool, carryingTrace: Bool) -> String {
        JobTriggers.enqueueFunction(
            "jobs_enqueue_callback", replacing: replacing, kind: callbackKind, payload: jobFinishedEvent, priority: 1, maxAttempts: 12,
            idempotencyKey: "'callback:job:' || NEW.id || ':' || NEW.attempt", traceParent: carryingTrace ? "NEW.trace_parent" : nil)
    }

    /// The callback job's payload: where to post, the Standard Webhooks id, and the event.
    private static let jobFinishedEvent = """
        jsonb_build_object(
                'url', NEW.callback_url,
                'webhookId', 'msg_cb_job_' || NEW.id || '_' || NEW.attempt,
                'event', jsonb_build_object(
                    'type', 'job.finished', 'jobId', NEW.id, 'kind', NEW.kind, 'state', NEW.state, 'attempt', NEW.attempt,
                    'errorCode', CASE WHEN NEW.state = 'completed' THEN NULL ELSE NEW.errors -> -1 ->> 'code' END,
                    'result', NEW.result,
                    'createdAt', fleet_wire_time(NEW.created_at),
                    'finishedAt', fleet_wire_time(coalesce(NEW.finished_at, now()))))
        """
}
