import Foundation

/// One reported figure.
struct Measurement {
    let metric: String
    let value: Double
    let unit: String
}

/// Collects repeated samples per metric and prints medians as a table or JSON lines.
struct Report {
    private var samples: [String: (unit: String, values: [Double])] = [:]
    private var order: [String] = []

    mutating func add(_ metric: String, _ value: Double, unit: String) {
        if samples[metric] == nil { order.append(metric) }
        samples[metric, default: (unit, [])].values.append(value)
    }

    func median(_ metric: String) -> Double? {
        guard let values = samples[metric]?.values.sorted(), !values.isEmpty else { return nil }
        let middle = values.count / 2
        return values.count % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2
    }

    var medians: [Measurement] {
        order.compactMap { metric in median(metric).map { Measurement(metric: metric, value: $0, unit: samples[metric]!.unit) } }
    }

    func runs(_ metric: String) -> Int { samples[metric]?.values.count ?? 0 }
}

/// A row comparing the fleet with a peer on one measure.
struct Comparison {
    let name: String
    let unit: String
    let fleet: Double?
    let peer: Double?
    /// True when smaller is better (latency).
    let lowerIsBetter: Bool
    let target: String
    let met: Bool?

    /// How many times better the fleet is: >1 means the fleet wins.
    var ratio: Double? {
        guard let fleet, let peer, fleet > 0, peer > 0 else { return nil }
        return lowerIsBetter ? peer / fleet : fleet / peer
    }
}

func printTable(title: String, peerName: String, rows: [Comparison], notes: [String]) {
    func format(_ value: Double?) -> String {
        guard let value else { return "-" }
        return value >= 100 ? String(format: "%.0f", value) : String(format: "%.2f", value)
    }
    let header = ["measure", "unit", "fleet", peerName, "ratio", "target", "met"]
    let cells = rows.map { row in
        [row.name, row.unit, format(row.fleet), format(row.peer), row.ratio.map { String(format: "%.2fx", $0) } ?? "-",
         row.target, row.met.map { $0 ? "yes" : "NO" } ?? "-"]
    }
    printGrid(title: title, header: header, rows: cells)
    notes.forEach { print($0) }
}

/// A left-aligned table: title, header, rule, rows.
func printGrid(title: String, header: [String], rows: [[String]]) {
    let widths = header.indices.map { column in ([header] + rows).map { $0[column].count }.max() ?? 0 }
    func line(_ values: [String]) -> String {
        values.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ")
    }
    print(title)
    print(line(header))
    print(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  "))
    rows.forEach { print(line($0)) }
}

func printJSONLines(_ measurements: [Measurement]) {
    for measurement in measurements {
        let value = measurement.value.isFinite ? String(format: "%.3f", measurement.value) : "null"
        print("{\"metric\":\"\(measurement.metric)\",\"value\":\(value),\"unit\":\"\(measurement.unit)\"}")
    }
}

/// A measurement that could not be taken.
struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
