import ArgumentParser
import DispatcherCore
import FakeProviders
import FleetHTTPClient
import FleetObjectStore
import FleetPostgres
import FleetQueue
import FleetStorage
import FleetSupport
import Foundation
import Imaging

/// `fleet-bench storage`: what keeping the images in object storage costs the image worker. A
/// real `image-worker` normalises the same uploads from local files and from the S3 gateway of
/// `scripts/s3.sh` in the same run, in alternating pairs (the order swapped every pair), and the
/// ratio S3 ÷ files is taken per pair; then one counted run through `S3FaultProxy` says what a
/// normalise and a cut-out ask of the store, request by request.
struct StorageSuite: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storage",
        abstract: "Normalise throughput with the images in local files against the S3 gateway, and the requests per job at the gateway.",
        discussion: """
            Starts the one-node Ceph gateway of scripts/s3.sh in --gateway-folder on --gateway-port (stopped at the end \
            when this run started it). Each measurement writes --count uploads into the store, starts an image-worker on \
            it (FLEET_STORAGE_ROOT, or FLEET_STORAGE=s3://… with the AWS variables) with image.normalize=--concurrency, \
            enqueues them at once and takes the rate from the jobs' own times (first enqueue to last finish).
            """)

    @Flag(help: "Print one JSON object per line ({\"metric\",\"value\",\"unit\"}) instead of tables.")
    var json = false
    @Option(help: "Alternating pairs (files, S3) per set of photos; each pair gives one ratio.") var pairs = 5
    @Option(help: "Uploads normalised per measurement.") var count = 24
    @Option(help: "Normalise jobs the worker runs at once.") var concurrency = 2
    @Option(help: "Jobs of each kind in the counted run (normalise, then the cut-out of each).") var countedJobs = 8
    @Option(help: "The corpus folder.") var corpus = packageRoot.appendingPathComponent("Tests/Fixtures/corpus").path
    @OptionGroup var gatewayOptions: GatewayOptions
    @Option(help: "The image worker's HTTP port (its /readyz says when it may be given jobs).") var workerHTTPPort = 17509

    func run() async throws {
        let all = try FileManager.default.contentsOfDirectory(atPath: corpus).filter { !$0.hasSuffix(".md") }.sorted()
            .map { "\(corpus)/\($0)" }
        let sets: [(name: String, files: [String])] = [("phone12mp", all.filter { $0.contains("phone") }), ("corpus", all)]
        let database = try await BenchDatabase.prepare()
        progress("database: \(try await database.settings())")
        let gateway = try await gatewayOptions.start()
        let stores = BenchStores(name: "storage", gateway: gateway.connection)
        defer { stores.removeFiles() }
        let bench = NormaliseBench(database: database, stores: stores, concurrency: concurrency, httpPort: workerHTTPPort)

        var report = Report()
        var pairRows: [[String]] = []
        for set in sets {
            for pair in 1...max(1, pairs) {
                var rates: [BenchStore: Double] = [:]
                // Swapped every pair, so a drift of the machine's load favours neither store.
                for store in pair.isMultiple(of: 2) ? [BenchStore.s3, .files] : [.files, .s3] {
                    progress("\(set.name), pair \(pair)/\(pairs): \(store.rawValue)")
                    rates[store] = try await bench.normaliseRate(files: set.files, count: count, on: store, label: "\(set.name)-\(pair)")
                }
                let (files, s3) = (rates[.files]!, rates[.s3]!)
                report.add("storage.\(set.name)_c\(concurrency).files", files, unit: "images/s")
                report.add("storage.\(set.name)_c\(concurrency).s3", s3, unit: "images/s")
                report.add("storage.\(set.name)_c\(concurrency).ratio", s3 / files, unit: "x")
                pairRows.append([set.name, "\(pair)", String(format: "%.2f", files), String(format: "%.2f", s3), String(format: "%.3fx", s3 / files)])
            }
        }
        progress("counted run: \(countedJobs) normalises, then their cut-outs, through the counting proxy")
        let counted = try await bench.countedRun(files: all, jobs: countedJobs)
        await gateway.stopIfStarted()
        for (job, requests) in counted {
            for kind in S3RequestKind.allCases {
                report.add("storage.requests.\(job).\(kind.rawValue.lowercased())", Double(requests[kind, default: 0]) / Double(countedJobs), unit: "requests/job")
            }
        }

        if json {
            printJSONLines(report.medians)
            return
        }
        printGrid(title: "storage suite: normalise at concurrency \(concurrency), \(count) uploads per measurement, alternating pairs",
                  header: ["set", "pair", "files images/s", "s3 images/s", "s3 ÷ files"], rows: pairRows)
        print("")
        printGrid(title: "medians of \(pairs) pairs", header: ["set", "files images/s", "s3 images/s", "median of the ratios", "target", "met"],
                  rows: sets.map { set in
            let key = "storage.\(set.name)_c\(concurrency)"
            let ratio = report.median("\(key).ratio")
            return [set.name, format(report.median("\(key).files")), format(report.median("\(key).s3")),
                    ratio.map { String(format: "%.3fx", $0) } ?? "-", "≥ 0.9x", ratio.map { $0 >= 0.9 ? "yes" : "NO" } ?? "-"]
        })
        print("")
        let targets: [String: [S3RequestKind: Int]] = [
            "normalize": [.getObject: 1, .putObject: 1], "cutout": [.getObject: 1, .putObject: 2],
        ]
        printGrid(title: "requests per job at the gateway (counted by the proxy, \(countedJobs) jobs of each kind; the workers' store checks left out)",
                  header: ["job"] + S3RequestKind.allCases.map(\.rawValue) + ["target", "met"],
                  rows: counted.map { job, requests in
            let target = targets[job] ?? [:]
            let perJob = S3RequestKind.allCases.map { Double(requests[$0, default: 0]) / Double(countedJobs) }
            let met = zip(S3RequestKind.allCases, perJob).allSatisfy { Double(target[$0, default: 0]) == $1 }
            return [job] + perJob.map { String(format: "%g", $0) }
                + [target.sorted { $0.key < $1.key }.map { "\($1) \($0.rawValue)" }.joined(separator: " + "), met ? "yes" : "NO"]
        })
        print("the rates are the jobs' own times: the first enqueue to the last finish; noise: under 5 % in the medians of ≥ 5 pairs")
    }

    private func format(_ value: Double?) -> String { value.map { String(format: "%.2f", $0) } ?? "-" }
}

/// One image worker at a time on one store, fed uploads and timed from the database's clock.
struct NormaliseBench {
    let database: BenchDatabase
    let stores: BenchStores
    let concurrency: Int
    let httpPort: Int
    let queue: JobQueue

    init(database: BenchDatabase, stores: BenchStores, concurrency: Int, httpPort: Int) {
        self.database = database
        self.stores = stores
        self.concurrency = concurrency
        self.httpPort = httpPort
        queue = JobQueue(executor: database.pool, knownKinds: FleetKinds.all)
    }

    /// Images per second over `count` uploads (the `files` round robin) on `store`; the uploads
    /// and photos are deleted afterwards (the gateway keeps its objects in memory).
    func normaliseRate(files: [String], count: Int, on store: BenchStore, label: String) async throws -> Double {
        let storage = stores.storage(store)
        let user = try StorageID("\(store.rawValue)-\(label)")
        let uploads = try await writeUploads(files: files, count: count, of: user, to: storage)
        let worker = try await startWorker(stores.environment(store))
        let ids = try await worker.stoppingAfter {
            let ids = try await queue.enqueue(try uploads.map {
                try NewJob(NormalizeImagePayload(userID: user, uploadID: $0, target: .body, imageID: $0))
            }).map(\.id)
            try await waitUntilCompleted(ids, worker: worker)
            return ids
        }
        let seconds = try await database.pool.query(
            "SELECT extract(epoch FROM max(finished_at) - min(created_at)) AS seconds FROM jobs WHERE id = ANY($1)",
            [PostgresArray(ids)]).rows[0].double("seconds")
        _ = try await storage.deleteAll(of: user)
        return Double(count) / seconds
    }

    /// `jobs` garment uploads normalised, then each cut out (the offline libvips backend), by a
    /// worker whose store is the gateway behind the counting proxy: the requests each kind made.
    func countedRun(files: [String], jobs: Int) async throws -> [(job: String, requests: [S3RequestKind: Int])] {
        let storage = stores.storage(.s3)
        let proxy = try await S3FaultProxy.start(before: stores.gateway!.endpoint)
        defer { Task { await proxy.stop() } }
        let user = try StorageID("counted")
        let uploads = try await writeUploads(files: files, count: jobs, of: user, to: storage)
        var environment = stores.environment(.s3, endpointURL: proxy.server.baseURL)
        environment["FLEET_CUTOUT_BACKENDS"] = "local"
        let worker = try await startWorker(environment)
        // The worker's store check (a probe PUT and DELETE at start and every 15 s) is not a job's.
        let jobRequests = { proxy.takeRequests().filter { !$0.key.contains(".fleet-probe/") }.countsByKind() }
        _ = proxy.takeRequests()
        let (normalised, cutOut) = try await worker.stoppingAfter {
            let normalises = try await queue.enqueue(try uploads.map {
                try NewJob(NormalizeImagePayload(userID: user, uploadID: $0, target: .garment, imageID: $0))
            }).map(\.id)
            try await waitUntilCompleted(normalises, worker: worker)
            let normalised = jobRequests()
            let cutouts = try await queue.enqueue(try uploads.map { try NewJob(GarmentCutoutPayload(userID: user, garmentID: $0)) }).map(\.id)
            try await waitUntilCompleted(cutouts, worker: worker)
            return (normalised, jobRequests())
        }
        _ = try await storage.deleteAll(of: user)
        return [("normalize", normalised), ("cutout", cutOut)]
    }

    private func writeUploads(files: [String], count: Int, of user: StorageID, to storage: any ImageStorage) async throws -> [StorageID] {
        let contents = try files.map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
        var uploads: [StorageID] = []
        for index in 0..<count {
            let upload = try StorageID("up\(index)")
            try await storage.write(contents[index % contents.count], to: .upload(user: user, upload: upload))
            uploads.append(upload)
        }
        return uploads
    }

    /// An image worker on the bench database, ready (its `/readyz`, which waits for its store's check).
    private func startWorker(_ environment: [String: String]) async throws -> BenchImageWorker {
        let port = httpPort
        let log = NSTemporaryDirectory() + "fleet-bench-image-worker-\(getpid()).log"
        let process = try ChildProcess(
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("image-worker").path, [],
            environment: environment.merging([
                "DATABASE_URL": database.url, "FLEET_CONCURRENCY": "image.normalize=\(concurrency)",
                "FLEET_HTTP_ADDRESS": "127.0.0.1:\(port)", "FLEET_LOG_LEVEL": "warning", "FLEET_POLL_INTERVAL_MS": "200",
            ]) { $1 },
            outputPath: log)
        let worker = BenchImageWorker(process: process, log: log)
        let http = CurlHTTPClient()
        let deadline = ContinuousClock.now + .seconds(120)
        while (try? await http.execute(HTTPClientRequest(url: "http://127.0.0.1:\(port)/readyz")))?.status != 200 {
            guard ContinuousClock.now < deadline, process.exitStatus == nil else {
                await worker.stop()
                throw BenchError("the image worker was not ready within 120 s: \(worker.logTail)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return worker
    }

    /// Polls until every job of `ids` completed; one that ended otherwise fails the run.
    private func waitUntilCompleted(_ ids: [Int64], worker: BenchImageWorker) async throws {
        let deadline = ContinuousClock.now + .seconds(600)
        while ContinuousClock.now < deadline {
            let row = try await database.pool.query("""
                SELECT count(*) FILTER (WHERE state = 'completed') AS completed,
                       count(*) FILTER (WHERE state IN ('dead', 'cancelled')) AS failed
                FROM jobs WHERE id = ANY($1)
                """, [PostgresArray(ids)]).rows[0]
            if try row.int("failed") > 0 { throw BenchError("\(try row.int("failed")) jobs failed: \(worker.logTail)") }
            if try row.int("completed") == ids.count { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("jobs still open after 600 s: \(worker.logTail)")
    }
}

/// An image worker the storage suite started, and where its output goes.
struct BenchImageWorker {
    let process: ChildProcess
    let log: String

    /// Drains it (SIGTERM, as a deploy would) and removes its log.
    func stop() async {
        process.signal(SIGTERM)
        if await process.wait(timeout: .seconds(40)) == nil { process.signal(SIGKILL) }
        try? FileManager.default.removeItem(atPath: log)
    }

    /// Runs `body`, then stops the worker, whether `body` threw or not.
    func stoppingAfter<T>(_ body: () async throws -> T) async throws -> T {
        do {
            let result = try await body()
            await stop()
            return result
        } catch {
            await stop()
            throw error
        }
    }

    var logTail: String { String(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(2000)) }
}
