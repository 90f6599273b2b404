import ArgumentParser
import FleetSupport
import Foundation
import Imaging

/// `fleet-bench image`: normalise throughput (images/s, one process, concurrency 1 and 2) on
/// the 12 MP phone upload and on the whole corpus, and peak memory — for the fleet's
/// pipeline, pyvips, Pillow and vipsthumbnail, in the same run.
struct ImageSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image", abstract: "The normalise pipeline against pyvips, Pillow and vipsthumbnail.")

    static let requirements = ["pillow==13.0.0", "pillow-heif==1.8.1", "pyvips==3.2.0"]

    @OptionGroup var options: SuiteOptions
    @Option(help: "Images per measurement.") var count = 24
    @Option(help: "The corpus folder.") var corpus = packageRoot.appendingPathComponent("Tests/Fixtures/corpus").path
    @Flag(help: "Measure the fleet only.") var skipPeers = false

    func run() async throws {
        let all = try FileManager.default.contentsOfDirectory(atPath: corpus).filter { !$0.hasSuffix(".md") }.sorted()
            .map { "\(corpus)/\($0)" }
        let sets: [(name: String, files: [String])] = [("phone12mp", all.filter { $0.contains("phone") }), ("corpus", all)]
        let peer = skipPeers ? nil : try await PythonPeer.prepare(script: "image_peers.py", requirements: ImageSuite.requirements)
        var report = Report()
        for round in 1...max(1, options.repeats) {
            for set in sets {
                for concurrency in [1, 2] {
                    progress("round \(round)/\(options.repeats): \(set.name), concurrency \(concurrency)")
                    let key = "image.\(set.name)_c\(concurrency)"
                    let fleet = try await fleetRun(files: set.files, concurrency: concurrency)
                    report.add("\(key).fleet", fleet.rate, unit: "images/s")
                    report.add("\(key).fleet_rss", Double(fleet.peakRSSKilobytes) / 1024, unit: "MB")
                    guard let peer else { continue }
                    for name in ["pyvips", "pillow"] {
                        let (result, rss) = try await peer.call([name, "--concurrency", "\(concurrency)", "--count", "\(count)"] + set.files)
                        report.add("\(key).\(name)", try number(result, "images_per_s"), unit: "images/s")
                        report.add("\(key).\(name)_rss", Double(rss) / 1024, unit: "MB")
                    }
                    report.add("\(key).vipsthumbnail", try await vipsthumbnailRate(files: set.files, concurrency: concurrency), unit: "images/s")
                }
            }
        }
        if options.json {
            printJSONLines(report.medians)
            return
        }
        var rows: [Comparison] = []
        for set in sets {
            for concurrency in [1, 2] {
                let key = "image.\(set.name)_c\(concurrency)"
                let fleet = report.median("\(key).fleet")
                for (peerName, factor) in [("pyvips", 0.9), ("pillow", 1.5), ("vipsthumbnail", 0.0)] {
                    let peerRate = report.median("\(key).\(peerName)")
                    rows.append(Comparison(
                        name: "\(set.name) c\(concurrency) vs \(peerName)", unit: "images/s", fleet: fleet, peer: peerRate,
                        lowerIsBetter: false, target: factor > 0 ? ">= \(factor)x" : "-",
                        met: factor > 0 ? fleet.flatMap { value in peerRate.map { value >= factor * $0 } } : nil))
                }
                let rss = report.median("\(key).fleet_rss")
                rows.append(Comparison(name: "\(set.name) c\(concurrency) peak RSS", unit: "MB", fleet: rss,
                                       peer: report.median("\(key).pyvips_rss"), lowerIsBetter: true,
                                       target: concurrency == 2 ? "< 250 MB" : "-", met: concurrency == 2 ? rss.map { $0 < 250 } : nil))
            }
        }
        printTable(title: "image suite: medians of \(options.repeats) runs, \(count) images per measurement", peerName: "peer",
                   rows: rows, notes: [
                       "peak RSS: the fleet's probe process vs the pyvips driver process",
                       "peers: \(ImageSuite.requirements.joined(separator: ", ")); vipsthumbnail: one process per image",
                   ])
    }

    /// The fleet's pipeline in a process of its own (`image-probe`), so its peak memory is its own.
    private func fleetRun(files: [String], concurrency: Int) async throws -> (rate: Double, peakRSSKilobytes: Int) {
        let output = NSTemporaryDirectory() + "image-probe-\(getpid()).out"
        defer { try? FileManager.default.removeItem(atPath: output) }
        let process = try ChildProcess("/proc/self/exe", ["image-probe", "--concurrency", "\(concurrency)", "--count", "\(count)"] + files,
                                       environment: ProcessInfo.processInfo.environment, outputPath: output)
        guard await process.wait() == 0, let text = try? String(contentsOfFile: output, encoding: .utf8),
              let rate = Double(text.split(separator: "\n").last ?? "") else {
            throw BenchError("image-probe failed: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
        }
        return (rate, process.peakRSSKilobytes ?? 0)
    }

    /// `vipsthumbnail` from libvips-tools, one process per image, `concurrency` at a time.
    private func vipsthumbnailRate(files: [String], concurrency: Int) async throws -> Double {
        let folder = NSTemporaryDirectory() + "vipsthumbnail-\(getpid())"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let started = ContinuousClock.now
        var running: [ChildProcess] = []
        for index in 0..<count {
            if running.count == concurrency {
                _ = await running.removeFirst().wait()
            }
            let file = files[index % files.count]
            running.append(try ChildProcess("/usr/bin/vipsthumbnail", [
                file, "--size", "1200x10000000>", "--export-profile", "srgb",
                "-o", "\(folder)/%s-\(index).jpg[Q=80,optimize_coding,strip]",
            ], environment: ProcessInfo.processInfo.environment))
        }
        for process in running { guard await process.wait() == 0 else { throw BenchError("vipsthumbnail failed") } }
        return Double(count) / (ContinuousClock.now - started).seconds
    }
}

/// The fleet's normalise pipeline on `count` images over `concurrency` threads; prints images/s.
struct ImageProbe: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image-probe", abstract: "Normalise images in a loop (started by the image suite).", shouldDisplay: false)

    @Option var concurrency = 1
    @Option var count = 24
    @Argument var files: [String]

    func run() async throws {
        try Vips.shareCores(among: concurrency)
        let normalizer = ImageNormalizer()
        for file in files { _ = try normalizer.normalize(path: file) }
        let started = ContinuousClock.now
        let files = self.files, count = self.count, concurrency = self.concurrency
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<concurrency {
                group.addTask {
                    for index in stride(from: lane, to: count, by: concurrency) {
                        _ = try await offload { try normalizer.normalize(path: files[index % files.count]) }
                    }
                }
            }
            try await group.waitForAll()
        }
        print(Double(count) / (ContinuousClock.now - started).seconds)
    }
}
