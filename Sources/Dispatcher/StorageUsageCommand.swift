import ArgumentParser
import FleetObjectStore
import FleetStorage
import FleetSupport
import Foundation

/// `dispatcher storage usage`: the store listed once, counted per kind.
struct StorageUsageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "usage",
        abstract: "List the image store once: objects and bytes per kind, and how many owners hold images.",
        discussion: """
            Reads the store directly, as the workers do, with this process's FLEET_STORAGE (or FLEET_STORAGE_ROOT) and, \
            for a bucket, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION and AWS_ENDPOINT_URL_S3: \
            no dispatcher, socket or database is involved, and the store's keys are the access check (listing needs \
            s3:ListBucket only). Kinds: upload, body, garment, cutout, preview, render; other counts paths that are no \
            image of the fleet (their bytes are not listed). Owners are the images' first folders: users and onboarding \
            tokens' trees. A bucket is listed 1,000 keys a request (a million objects: 1,000 requests, minutes); a \
            progress line goes to stderr meanwhile. The growth over time is in the metrics \
            (fleet_storage_written_bytes_total{kind} and the others: docs/operations.md, "Storage usage and growth").
            """)

    @OptionGroup var output: OutputFormat
    @Option(help: "Seconds between progress lines on stderr while the listing runs (0: none).") var progressSeconds = 5.0

    func validate() throws {
        guard progressSeconds >= 0 else { throw ValidationError("--progress-seconds must not be negative") }
    }

    func run() async throws {
        let location = try StorageLocation.load(from: ProcessInfo.processInfo.environment)
        if case .files(let root) = location {
            var folder: ObjCBool = false
            // A missing folder lists as empty: say so rather than count nothing.
            guard FileManager.default.fileExists(atPath: root, isDirectory: &folder), folder.boolValue else {
                throw ConfigurationError(variable: "FLEET_STORAGE_ROOT", reason: "no folder at \(root)")
            }
        }
        let started = ContinuousClock.now
        var lastProgress = started
        let tally = try await location.makeImageStorage().tally { tally in
            let now = ContinuousClock.now
            guard progressSeconds > 0, now - lastProgress >= .seconds(progressSeconds) else { return }
            lastProgress = now
            let rate = Int(Double(tally.total.objects) / ((now - started) / .seconds(1)))
            FileHandle.standardError.write(Data(
                "listed \(tally.total.objects) objects, \(StorageUsageReport.size(tally.total.bytes)) so far (\(rate) objects/s)\n".utf8))
        }
        try output.print(StorageUsageReport(location: location, tally: tally), table: \.text)
    }
}

/// What `dispatcher storage usage` prints: every kind (0 for none), the total and the owners.
struct StorageUsageReport: Encodable {
    struct Line: Encodable {
        let kind: String
        let objects: Int
        /// Nil for `other`: a listing gives no size for a path that is no key.
        let bytes: Int?
    }

    /// The store as the logs name it (never a key).
    let location: String
    let kinds: [Line]
    /// The fleet's images: `other` left out.
    let total: StorageTally.Amount
    let owners: Int

    init(location: StorageLocation, tally: StorageTally) {
        self.location = location.summary
        kinds = StorageKind.allCases.map { kind in
            let amount = tally.byKind[kind] ?? StorageTally.Amount()
            return Line(kind: kind.rawValue, objects: amount.objects, bytes: kind == .other ? nil : amount.bytes)
        }
        total = tally.total
        owners = tally.owners.count
    }

    var text: String {
        var table = TextTable("KIND", "OBJECTS", "BYTES", "SIZE", numeric: [1, 2, 3])
        for line in kinds { table.append(line.kind, "\(line.objects)", line.bytes.map(String.init) ?? "-", line.bytes.map(Self.size) ?? "-") }
        table.append("total", "\(total.objects)", "\(total.bytes)", Self.size(total.bytes))
        let owners = self.owners == 1 ? "1 owner (a user or an onboarding token) holds" : "\(self.owners) owners (users and onboarding tokens) hold"
        return table.text + "\n\(owners) images in \(location)"
    }

    /// Bytes for people, in binary units.
    static func size(_ bytes: Int) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
        var value = Double(bytes)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f", value) + " " + units[unit]
    }
}
