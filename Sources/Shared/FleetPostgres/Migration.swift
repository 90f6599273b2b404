/// One versioned step of the schema, or one owner's part of it. Versions only grow; a released
/// step is never edited. A version may have parts in several modules (each creates its own
/// tables): they share the version and its name, and the runner applies them together, in the
/// order of its list.
public struct Migration: Sendable {
    public let version: Int
    public let name: String
    public let sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}
