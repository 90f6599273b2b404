import Foundation

/// Decodes a `Decodable` straight from a parsed `JSONValue`, with no JSON text in between, and
/// notes which object fields the type asked for, so the fields nobody read are known without
/// encoding the value back. The dispatcher turns every request's arguments into its typed request
/// this way: through `JSONEncoder` and `JSONDecoder` (text out, text in, then the request encoded
/// again to find the fields it did not understand) that took a fifth of the dispatcher's CPU per
/// single enqueue.
///
/// Errors are `DecodingError`s with the coding paths and the types `JSONDecoder` gives for the
/// same input: a missing field, a value of the wrong type (`typeMismatch`), a null where a value
/// is needed (`valueNotFound`), a number that does not fit its integer type or a string that is no
/// case of an enum (`dataCorrupted`). Numbers are the `JSONValue`'s doubles.
public struct JSONValueDecoder {
    /// Reads a `Date` from a string; nil refuses it.
    public var parseDate: (String) -> Date?

    public init(parseDate: @escaping (String) -> Date?) {
        self.parseDate = parseDate
    }

    /// The decoded value, and the paths (`root.field`, `root.items[2].field`) of the object fields,
    /// not null, that no decoding asked for, sorted. A field decoded as a `JSONValue` is read whole.
    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, root: String) throws -> (value: T, unreadFields: [String]) {
        let reads = FieldReads()
        let decoded = try ValueDecoder(value: value, codingPath: [], reads: reads, parseDate: parseDate).decodeValue(T.self)
        return (decoded, reads.unread(root: root))
    }

    /// A coding path as the unread fields are named: `root.field[2].other`.
    public static func describe(_ path: [any CodingKey], root: String) -> String {
        path.reduce(root) { text, key in key.intValue.map { "\(text)[\($0)]" } ?? "\(text).\(key.stringValue)" }
    }
}

/// The objects a decoding opened, each with the keys asked of it (an object may be opened more
/// than once, by a type and its parts).
private final class FieldReads {
    private var objects: [String: (fields: [String: JSONValue], read: Set<String>)] = [:]

    func opened(_ fields: [String: JSONValue], at path: [any CodingKey]) -> String {
        let key = JSONValueDecoder.describe(path, root: "")
        if objects[key] == nil { objects[key] = (fields, []) }
        return key
    }

    func read(_ field: String, in object: String) {
        objects[object]?.read.insert(field)
    }

    /// Every field of the object at `path` read (it was decoded whole, as a `JSONValue`).
    func readWhole(at path: [any CodingKey]) {
        let key = JSONValueDecoder.describe(path, root: "")
        if let fields = objects[key]?.fields { objects[key]?.read = Set(fields.keys) }
    }

    func unread(root: String) -> [String] {
        objects.flatMap { path, object in
            object.fields.compactMap { field, value in
                value == .null || object.read.contains(field) ? nil : "\(root)\(path).\(field)"
            }
        }.sorted()
    }
}

private struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "\(intValue ?? 0)" }
    init(_ index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

private struct ValueDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    let reads: FieldReads
    let parseDate: (String) -> Date?
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func child(_ value: JSONValue, _ key: any CodingKey) -> ValueDecoder {
        ValueDecoder(value: value, codingPath: codingPath + [key], reads: reads, parseDate: parseDate)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let fields) = value else { throw mismatch([String: Any].self) }
        return KeyedDecodingContainer(KeyedContainer(decoder: self, fields: fields, object: reads.opened(fields, at: codingPath)))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else { throw mismatch([Any].self) }
        return UnkeyedContainer(decoder: self, items: items)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func mismatch(_ type: Any.Type) -> DecodingError {
        if value == .null {
            return .valueNotFound(type, .init(codingPath: codingPath, debugDescription: "Expected \(type) but found null instead."))
        }
        return .typeMismatch(type, .init(codingPath: codingPath, debugDescription: "Expected to decode \(type) but found \(value.kindName) instead."))
    }

    /// Types `JSONDecoder` reads itself rather than through their own `init(from:)`.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == JSONValue.self {
            reads.readWhole(at: codingPath)
            return value as! T
        }
        if T.self == Date.self {
            guard case .string(let text) = value else { throw mismatch(String.self) }
            guard let date = parseDate(text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "'\(text)' is not an ISO 8601 date"))
            }
            return date as! T
        }
        // Noted before the type's own decoding: a type that never opens the object (one with no
        // fields, `{}` on the wire) leaves every field sent to it unread, not unseen.
        if case .object(let fields) = value { _ = reads.opened(fields, at: codingPath) }
        return try T(from: self)
    }

    func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        guard case .number(let number) = value else { throw mismatch(T.self) }
        guard let integer = T(exactly: number) else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Parsed JSON number <\(number)> does not fit in \(T.self)."))
        }
        return integer
    }
}

extension ValueDecoder: SingleValueDecodingContainer {
    func decodeNil() -> Bool { value == .null }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(Bool.self) }
        return flag
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let text) = value else { throw mismatch(String.self) }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard case .number(let number) = value else { throw mismatch(Double.self) }
        return number
    }

    func decode(_ type: Float.Type) throws -> Float {
        guard case .number(let number) = value else { throw mismatch(Float.self) }
        guard abs(number) <= Double(Float.greatestFiniteMagnitude) else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Parsed JSON number <\(number)> does not fit in Float."))
        }
        return Float(number)
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(type) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: ValueDecoder
    let fields: [String: JSONValue]
    /// This object's entry in the decoding's `FieldReads`.
    let object: String

    var codingPath: [any CodingKey] { decoder.codingPath }
    var allKeys: [Key] { fields.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool {
        guard fields[key.stringValue] != nil else { return false }
        decoder.reads.read(key.stringValue, in: object)
        return true
    }

    /// The field's decoder, the field noted as read.
    private func child(_ key: Key) throws -> ValueDecoder {
        guard let value = fields[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "No value associated with key \(key.stringValue)."))
        }
        decoder.reads.read(key.stringValue, in: object)
        return decoder.child(value, key)
    }

    func decodeNil(forKey key: Key) throws -> Bool { try child(key).decodeNil() }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try child(key).decode(type) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try child(key).decode(type) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try child(key).decode(type) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try child(key).decode(type) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try child(key).decode(type) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try child(key).decode(type) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try child(key).decode(type) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try child(key).decode(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try child(key).decode(type) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try child(key).decode(type) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try child(key).decode(type) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try child(key).decode(type) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try child(key).decode(type) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try child(key).decode(type) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try child(key).decodeValue(type) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try child(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { try child(key).unkeyedContainer() }
    func superDecoder() throws -> any Decoder { decoder }
    func superDecoder(forKey key: Key) throws -> any Decoder { try child(key) }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let decoder: ValueDecoder
    let items: [JSONValue]
    private(set) var currentIndex = 0

    init(decoder: ValueDecoder, items: [JSONValue]) {
        self.decoder = decoder
        self.items = items
    }

    var codingPath: [any CodingKey] { decoder.codingPath }
    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    /// The next item's decoder; the container moves past it.
    private mutating func next(_ type: Any.Type) throws -> ValueDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath + [IndexKey(currentIndex)], debugDescription: "Unkeyed container is at end."))
        }
        defer { currentIndex += 1 }
        return decoder.child(items[currentIndex], IndexKey(currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, items[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(type).decode(type) }
    mutating func decode(_ type: String.Type) throws -> String { try next(type).decode(type) }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(type).decode(type) }
    mutating func decode(_ type: Float.Type) throws -> Float { try next(type).decode(type) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(type).decode(type) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(type).decode(type) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(type).decode(type) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(type).decode(type) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(type).decode(type) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next(type).decode(type) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(type).decode(type) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(type).decode(type) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(type).decode(type) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(type).decode(type) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(type).decodeValue(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next([String: Any].self).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next([Any].self).unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next(Any.self) }
}

private extension JSONValue {
    var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }
}
