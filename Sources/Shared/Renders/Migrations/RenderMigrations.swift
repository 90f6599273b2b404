import FleetPostgres

import FleetQueue

/// The renders' and credits' migrations (`docs/schema.md`).
public enum RenderMigrations {
    public static let all = [
        rendersAndCredits, providerLatency, renderCallbacks, renderCallbackTraces, renderGarmentInput, purgeLinkedOnboardingTrees, renderFailureReasons,
        renderRetries, renderStartedAt,
    ]

    /// FleetCallbacks' and Imaging's kinds, which the schema does not import (a process that
    /// migrates links no domain code): `SchemaUpgradeTests` checks they agree.
    static let callbackKind: JobKind = "callback.deliver"
    static let purgeKind: JobKind = "account.purge"

    /// The trigger function of version 7, carrying the trace of the render's job from version 11,
    /// from version 19 the event saying which garment image was sent (`withGarmentInput`), from
    /// version 23 why a failed render failed (`withFailure`), and from version 24 one callback per
    /// end of a render an operator retried (`withRetries`).
    static func renderCallbackFunction(
        replacing: Bool, carryingTrace: Bool, withGarmentInput: Bool = false, withFailure: Bool = false, withRetries: Bool = false
    ) -> String {
        JobTriggers.enqueueFunction(
            "renders_enqueue_callback", replacing: replacing, kind: callbackKind,
            payload: renderFinishedEvent(withGarmentInput: withGarmentInput, withFailure: withFailure, withRetries: withRetries),
            priority: 1, maxAttempts: 12,
            idempotencyKey: "'callback:render:' || NEW.id" + (withRetries ? retrySuffix(":") : ""),
            traceParent: carryingTrace ? JobTriggers.traceParent(ofJob: "NEW.job_id") : nil)
    }

    /// `separator` and the render's retry count, after its first retry (none before: the
    /// callback of a render never retried keeps the key and id it always had).
    private static func retrySuffix(_ separator: String) -> String {
        " || CASE WHEN NEW.retries = 0 THEN '' ELSE '\(separator)' || NEW.retries END"
    }

    /// The callback job's payload: where to post, the Standard Webhooks id, and the event.
    private static func renderFinishedEvent(withGarmentInput: Bool, withFailure: Bool, withRetries: Bool) -> String {
        var event = renderFinishedEventBefore19
        if withGarmentInput {
            event = event.replacingOccurrences(of: "'resultPath', NEW.result_path,", with: "'resultPath', NEW.result_path, 'garmentCutout', NEW.garment_cutout,")
        }
        if withFailure {
            event = event.replacingOccurrences(
                of: "'errorCode', NEW.error_code,", with: "'errorCode', NEW.error_code, 'failureCode', NEW.failure_code, 'errorMessage', NEW.error_message,")
        }
        if withRetries {
            event = event
                .replacingOccurrences(of: "'msg_cb_render_' || NEW.id,", with: "'msg_cb_render_' || NEW.id\(retrySuffix("_")),")
                .replacingOccurrences(of: "'renderId', NEW.id,", with: "'renderId', NEW.id, 'retries', NEW.retries,")
        }
        return event
    }

    private static let renderFinishedEventBefore19 = """
        jsonb_build_object(
                'url', NEW.callback_url,
                'webhookId', 'msg_cb_render_' || NEW.id,
                'event', jsonb_build_object(
                    'type', 'render.finished', 'renderId', NEW.id, 'userId', NEW.user_id, 'status', NEW.status,
                    'errorCode', NEW.error_code, 'resultPath', NEW.result_path,
                    'createdAt', fleet_wire_time(NEW.created_at), 'finishedAt', fleet_wire_time(now())))
        """
}
