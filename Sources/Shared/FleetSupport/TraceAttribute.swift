/// The attribute names the fleet's spans share (`docs/operations.md`, "Traces"), one spelling
/// for every layer that sets them.
public enum TraceAttribute {
    public static let op = "dispatcher.op"
    public static let kind = "job.kind"
    public static let jobID = "job.id"
    public static let jobCount = "job.count"
    public static let attempt = "job.attempt"
    public static let renderID = "render.id"
    public static let provider = "render.provider"
    /// How the span's work ended: `completed`, `retry`, `dead`…; a request's `ok` or its error code.
    public static let outcome = "outcome"
}
