import DispatcherProtocol
import FleetSupport

/// A request whose most frequent arguments are read straight from the parsed frame, without
/// `JSONValueDecoder` (`ArgumentDecoder`). Only arguments of exactly that shape are: anything
/// else (another field, another type, a null) goes through the decoder, so every refusal and
/// its message stay the decoder's.
protocol PlainArguments {
    /// The request when `arguments` has the plain shape, as the decoder would make it; nil otherwise.
    init?(plainArguments arguments: JSONValue)
}

extension EnqueueRequest: PlainArguments {
    /// A backend's enqueue: `{"kind": <string>}`, with at most a `"payload": <object>` beside it.
    init?(plainArguments arguments: JSONValue) {
        guard case .object(let fields) = arguments, case .string(let kind)? = fields["kind"] else { return nil }
        switch (fields.count, fields["payload"]) {
        case (1, nil): self.init(kind: kind)
        case (2, .object(let payload)?): self.init(kind: kind, payload: payload)
        default: return nil
        }
    }
}
