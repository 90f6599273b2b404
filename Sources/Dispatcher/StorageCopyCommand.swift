import ArgumentParser
import FleetObjectStore
import FleetStorage
import FleetSupport
import Foundation

struct StorageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storage", abstract: "The image store itself, read with the process's storage settings.", subcommands: [StorageCopyCommand.self, StorageUsageCommand.self])
}

struct StorageCopyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy", abstract: "Copy every image of one store into another: a file tree into a bucket, or back.",
        discussion: """
            Locations are written as FLEET_STORAGE takes them: s3://bucket/prefix (keys and endpoint from \
            AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL_S3), \
            file:///folder or the folder's path. The source is listed a page at a time; each object is skipped when \
            the destination holds it with the same size and MD5, kept when the destination holds other bytes (the \
            fleet wrote them since), otherwise copied with a conditional write, read back and compared. An object \
            deleted in the source meanwhile (a purge) is never left in the destination. Run it again until it \
            copies nothing: a second run skips what the first copied. Safe while the fleet runs with \
            FLEET_STORAGE_FALLBACK set: docs/operations.md, "Moving to object storage". A progress line goes to \
            stderr; the summary to stdout (--json for scripts). Exits 1 when any object failed.
            """)

    @Option(help: "The store to copy from (s3://bucket/prefix, file:///folder or a folder's path).") var from: String
    @Option(help: "The store to copy into.") var to: String
    @Flag(help: "List and compare only: count what would be copied, write nothing.") var dryRun = false
    @Option(help: "Objects copied at once (1-64).") var concurrency = 8
    @Option(help: "Seconds between progress lines on stderr (0: none).") var progressSeconds = 5.0
    @Option(help: "Objects larger than this many bytes are failures (each is held in memory while copied).")
    var maxObjectBytes = StorageCopy.Options().maxObjectBytes
    @OptionGroup var output: OutputFormat

    func validate() throws {
        guard (1...64).contains(concurrency) else { throw ValidationError("--concurrency must be 1 to 64") }
        guard progressSeconds >= 0 else { throw ValidationError("--progress-seconds must not be negative") }
        guard maxObjectBytes > 0 else { throw ValidationError("--max-object-bytes must be positive") }
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let source = try StorageLocation.parse(from, variable: "--from", environment: environment)
        let destination = try StorageLocation.parse(to, variable: "--to", environment: environment)
        guard source != destination else { throw ValidationError("--from and --to are the same store") }
        var options = StorageCopy.Options()
        options.dryRun = dryRun
        options.concurrency = concurrency
        options.maxObjectBytes = maxObjectBytes
        let copy = StorageCopy(from: source.makeImageStorage(), to: destination.makeImageStorage(), options: options)
        let reporter = progressSeconds > 0 ? Task { await reportProgress(of: copy, every: .milliseconds(Int(progressSeconds * 1000))) } : nil
        let counts: StorageCopyCounts
        do {
            counts = try await copy.run()
            reporter?.cancel()
        } catch {
            reporter?.cancel()
            throw CopyFailed(description: "cannot list \(source.summary): \(error)")
        }
        let summary = StorageCopySummary(from: source.summary, to: destination.summary, dryRun: dryRun, counts: counts)
        try output.print(summary, table: StorageCopySummary.text)
        if counts.failed > 0 { throw ExitCode(1) }
    }

    private func reportProgress(of copy: StorageCopy, every interval: Duration) async {
        let started = ContinuousClock.now
        while (try? await Task.sleep(for: interval)) != nil {
            let counts = copy.progress
            let seconds = (ContinuousClock.now - started).seconds
            let line = "copy: \(counts.listed) listed, \(counts.copied) \(dryRun ? "to copy" : "copied") (\(megabytes(counts.copiedBytes))), "
                + "\(counts.skipped) skipped, \(counts.kept) kept, \(counts.vanished) vanished, \(counts.failed) failed; "
                + String(format: "%.1f objects/s, %.2f MB/s\n", Double(counts.copied) / seconds, Double(counts.copiedBytes) / 1e6 / seconds)
            FileHandle.standardError.write(Data(line.utf8))
        }
    }
}

/// A copy that could not run at all (its source not listable).
private struct CopyFailed: Error, CustomStringConvertible {
    let description: String
}

/// What `storage copy` prints: where from and to, and its counts.
struct StorageCopySummary: Encodable {
    let from: String
    let to: String
    let dryRun: Bool
    let counts: StorageCopyCounts
    let objectsPerSecond: Double
    let megabytesPerSecond: Double

    init(from: String, to: String, dryRun: Bool, counts: StorageCopyCounts) {
        self.from = from
        self.to = to
        self.dryRun = dryRun
        self.counts = counts
        self.objectsPerSecond = counts.objectsPerSecond
        self.megabytesPerSecond = counts.megabytesPerSecond
    }

    static func text(_ summary: StorageCopySummary) -> String {
        let counts = summary.counts
        var table = TextTable("OUTCOME", "OBJECTS", "BYTES", numeric: [1, 2])
        table.append("listed", "\(counts.listed)", "")
        table.append(summary.dryRun ? "to copy" : "copied", "\(counts.copied)", "\(counts.copiedBytes)")
        table.append("skipped (same already)", "\(counts.skipped)", "\(counts.skippedBytes)")
        table.append("kept (destination's newer)", "\(counts.kept)", "")
        table.append("vanished (deleted meanwhile)", "\(counts.vanished)", "")
        table.append("foreign (no fleet key)", "\(counts.foreign)", "")
        table.append("failed", "\(counts.failed)", "")
        var lines = [
            "\(summary.dryRun ? "dry run: nothing written; " : "")from \(summary.from) to \(summary.to)",
            table.text,
            String(format: "%.1f s, %.1f objects/s, %.2f MB/s", counts.seconds, summary.objectsPerSecond, summary.megabytesPerSecond),
        ]
        if !counts.failures.isEmpty {
            lines.append("failures\(counts.failed > counts.failures.count ? " (the first \(counts.failures.count))" : ""):")
            lines += counts.failures.map { "  \($0)" }
        }
        return lines.joined(separator: "\n")
    }
}

private func megabytes(_ bytes: Int) -> String { String(format: "%.2f MB", Double(bytes) / 1e6) }
