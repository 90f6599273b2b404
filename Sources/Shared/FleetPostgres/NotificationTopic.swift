/// A NOTIFY channel with the shape of its payload, declared once, by the module that owns what it
/// announces (`QueueChannel`, `RenderChannel`): every `pg_notify` built in Swift, every trigger a
/// migration writes and every subscription names the channel through it, and its payload is
/// encoded and decoded here only (River's `NotificationTopic`). Notifications are hints: a
/// payload that does not decode is logged and ignored by its receiver, never fatal.
public struct NotificationTopic<Payload: Sendable>: NotificationChannel {
    /// The channel's name, as `LISTEN` and `pg_notify` take it.
    public let name: String
    private let encoder: @Sendable (Payload) -> String
    private let decoder: @Sendable (String) -> Payload?

    public init(_ name: String, encode: @escaping @Sendable (Payload) -> String, decode: @escaping @Sendable (String) -> Payload?) {
        self.name = name
        self.encoder = encode
        self.decoder = decode
    }

    /// The payload's text, as sent.
    public func encode(_ payload: Payload) -> String { encoder(payload) }

    /// The payload a notification on this channel carries; nil for a shape it does not know.
    public func decode(_ text: String) -> Payload? { decoder(text) }

    /// `pg_notify('<name>', <payloadSQL>)` for SQL that builds the payload itself: `payloadSQL` is
    /// an expression whose text must be this topic's encoding of the payload.
    public func notifySQL(payload payloadSQL: String) -> String { "pg_notify('\(name)', \(payloadSQL))" }
}

extension NotificationTopic where Payload == String {
    /// A channel whose payload is its text as is (an id).
    public static func text(_ name: String) -> NotificationTopic<String> {
        NotificationTopic(name, encode: { $0 }, decode: { $0 })
    }
}

/// A channel to subscribe to, whatever its payload.
public protocol NotificationChannel: Sendable {
    var name: String { get }
}

extension DefaultStringInterpolation {
    /// A topic in a string is a mistake (its description, not its name, would land in the SQL):
    /// interpolate `name`, or `notifySQL(payload:)`.
    @available(*, unavailable, message: "interpolate the topic's name, or notifySQL(payload:)")
    public mutating func appendInterpolation<Payload>(_ topic: NotificationTopic<Payload>) {}
}
