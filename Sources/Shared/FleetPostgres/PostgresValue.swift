import Foundation

/// A value sent as a statement parameter, in PostgreSQL's text format.
public protocol PostgresEncodable: Sendable {
    var postgresText: String { get }
}

// The encoders and `PostgresArray`'s generic initialisers are `@inlinable`: a batched enqueue
// (`FleetQueue`) encodes seven arrays of thousands of values through them, and called across
// the module boundary unspecialised, each value went through a key path projection and generic
// metadata lookups (0.80 of the enqueue rate, docs/benchmarks.md).
extension String: PostgresEncodable { @inlinable public var postgresText: String { self } }
extension Int: PostgresEncodable { @inlinable public var postgresText: String { String(self) } }
extension Int32: PostgresEncodable { @inlinable public var postgresText: String { String(self) } }
extension Int64: PostgresEncodable { @inlinable public var postgresText: String { String(self) } }
extension Double: PostgresEncodable { @inlinable public var postgresText: String { String(self) } }
extension Bool: PostgresEncodable { @inlinable public var postgresText: String { self ? "t" : "f" } }

/// A one-dimensional array parameter (`text[]`, `bigint[]`, `jsonb[]`…) in array-literal form,
/// so a whole batch travels as one parameter of one statement.
public struct PostgresArray: PostgresEncodable {
    public let elements: [String?]

    public init(_ elements: [String?]) { self.elements = elements }
    // Typed `[String?]`: an `[String]` would call the generic initialiser again, forever.
    @inlinable public init<T: PostgresEncodable>(_ values: [T]) {
        let texts: [String?] = values.map { $0.postgresText }
        self.init(texts)
    }

    @inlinable public init<T: PostgresEncodable>(_ values: [T?]) {
        let texts: [String?] = values.map { $0?.postgresText }
        self.init(texts)
    }

    public var postgresText: String {
        // Byte by byte: batches of thousands of elements are encoded on the enqueue hot path.
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(elements.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        for (index, element) in elements.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            guard let element else {
                out.append(contentsOf: "NULL".utf8)
                continue
            }
            out.append(UInt8(ascii: "\""))
            for byte in element.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}

/// One row of a result, cells kept as PostgreSQL's text output.
public struct PostgresRow: Sendable {
    let columns: PostgresColumns
    let cells: [String?]

    public subscript(column: String) -> String? {
        guard let index = columns.index[column] else { return nil }
        return cells[index]
    }

    public func string(_ column: String) throws -> String {
        guard let value = self[column] else { throw PostgresError.decoding(column: column, value: nil, expected: "text") }
        return value
    }

    public func int64(_ column: String) throws -> Int64 {
        guard let text = self[column], let value = Int64(text) else {
            throw PostgresError.decoding(column: column, value: self[column], expected: "integer")
        }
        return value
    }

    public func int(_ column: String) throws -> Int { Int(try int64(column)) }

    public func double(_ column: String) throws -> Double {
        guard let text = self[column], let value = Double(text) else {
            throw PostgresError.decoding(column: column, value: self[column], expected: "number")
        }
        return value
    }

    public func bool(_ column: String) throws -> Bool {
        switch self[column] {
        case "t": return true
        case "f": return false
        case let other: throw PostgresError.decoding(column: column, value: other, expected: "boolean")
        }
    }

    /// A `timestamptz` selected as `extract(epoch from …)`.
    public func date(_ column: String) throws -> Date { Date(timeIntervalSince1970: try double(column)) }

    public func optionalDate(_ column: String) throws -> Date? {
        guard self[column] != nil else { return nil }
        return try date(column)
    }
}

final class PostgresColumns: Sendable {
    let names: [String]
    let index: [String: Int]

    init(names: [String]) {
        self.names = names
        self.index = Dictionary(names.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
    }
}

/// The outcome of one statement: its rows, and how many rows it touched.
public struct PostgresResult: Sendable {
    public let rows: [PostgresRow]
    public let affectedRows: Int
}
