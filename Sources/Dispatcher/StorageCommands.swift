import ArgumentParser
import FleetObjectStore
import FleetStorage
import Foundation

/// `dispatcher storage`: the image store itself, read with this process's storage settings.
struct StorageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storage",
        abstract: "The image store (a folder or a bucket), read directly with the fleet's storage settings.",
        discussion: """
            These commands reach the store as the workers do, with this process's FLEET_STORAGE (or FLEET_STORAGE_ROOT) \
            and, for a bucket, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION and \
            AWS_ENDPOINT_URL_S3: no dispatcher, socket or database is involved, and the store's keys are the access check.
            """,
        subcommands: [Usage.self])
}

extension StorageCommand {
    struct Usage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the store once: objects and bytes per kind, and how many owners hold images.",
            discussion: """
                Kinds: upload, body, garment, cutout, preview, render; other is anything else under the root (the start \
                check's probe, a write in progress, a file put there by hand). Owners are the first folders of the images: \
                users and onboarding tokens' trees. A bucket is listed 1,000 keys a request (a million objects: 1,000 \
                requests, minutes); a progress line goes to stderr every --progress-every seconds meanwhile. \
                The growth over time is in the metrics (fleet_storage_written_bytes_total{kind} and the others, \
                docs/operations.md).
                """)

        @OptionGroup var output: OutputFormat
        @Option(help: "Seconds between progress lines on stderr while the listing runs (0: none).") var progressEvery: Double = 5

        func validate() throws {
            guard progressEvery >= 0 else { throw ValidationError("--progress-every must be 0 or more seconds") }
        }

        func run() async throws {
            let location = try StorageLocation.load(from: ProcessInfo.processInfo.environment)
            let started = ContinuousClock.now
            var lastProgress = started
            let tally = try await location.makeInventory().tally { tally in
                let now = ContinuousClock.now
                guard progressEvery > 0, now - lastProgress >= .seconds(progressEvery) else { return }
                lastProgress = now
                let rate = Int(Double(tally.total.objects) / ((now - started) / .seconds(1)))
                FileHandle.standardError.write(Data(
                    "listed \(tally.total.objects) objects, \(StorageUsageReport.size(tally.total.bytes)) so far (\(rate) objects/s)\n".utf8))
            }
            try output.print(StorageUsageReport(location: location, tally: tally), table: \.text)
        }
    }
}

/// What `dispatcher storage usage` prints: every kind (0 for none), the total and the owners.
struct StorageUsageReport: Encodable {
    struct Line: Encodable {
        let kind: String
        let objects: Int
        let bytes: Int
    }

    /// The store as the logs name it (never a key).
    let location: String
    let kinds: [Line]
    let total: StorageTally.Amount
    let owners: Int

    init(location: StorageLocation, tally: StorageTally) {
        self.location = location.summary
        kinds = StorageKind.allCases.map { kind in
            let amount = tally.byKind[kind] ?? StorageTally.Amount()
            return Line(kind: kind.rawValue, objects: amount.objects, bytes: amount.bytes)
        }
        total = tally.total
        owners = tally.owners.count
    }

    var text: String {
        var table = TextTable("KIND", "OBJECTS", "BYTES", "SIZE", numeric: [1, 2, 3])
        for line in kinds { table.append(line.kind, "\(line.objects)", "\(line.bytes)", Self.size(line.bytes)) }
        table.append("total", "\(total.objects)", "\(total.bytes)", Self.size(total.bytes))
        return table.text + "\n\(owners) owners (users and onboarding tokens) hold images in \(location)"
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
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
    }
}
