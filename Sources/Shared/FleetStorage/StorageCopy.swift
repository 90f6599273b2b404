import FleetSupport
import Foundation
import Synchronization

/// What a copy of one store into another counted (`StorageCopy`), for its progress line and
/// its summary.
public struct StorageCopyCounts: Sendable, Equatable, Codable {
    /// Objects listed in the source.
    public var listed = 0
    /// Copied and verified (with `dryRun`: would be copied), and their bytes.
    public var copied = 0
    public var copiedBytes = 0
    /// In the destination already with the same size and MD5: left as they are.
    public var skipped = 0
    public var skippedBytes = 0
    /// In the destination already with other bytes: written there by the fleet since the move
    /// began (the new store takes every write), so the destination's are kept.
    public var kept = 0
    /// Deleted in the source while the copy ran (a purge): not copied, or the copy removed again.
    public var vanished = 0
    /// Paths in the source that are no fleet key: not copied.
    public var foreign = 0
    public var failed = 0
    /// The first failures (`StorageCopy.failureSamples`), each naming its path and why.
    public var failures: [String] = []
    public var seconds = 0.0

    public init() {}

    /// Objects per second and megabytes (10^6 bytes) per second copied.
    public var objectsPerSecond: Double { seconds > 0 ? Double(copied) / seconds : 0 }
    public var megabytesPerSecond: Double { seconds > 0 ? Double(copiedBytes) / 1e6 / seconds : 0 }
}

/// Copies every object of one store into another (`dispatcher storage copy`, the move between a
/// file tree and a bucket in either direction), a page of the source at a time. Each object is:
///
/// - skipped when the destination holds it with the same size and MD5 (resumable by construction:
///   a second run skips what the first copied);
/// - kept in the destination when it is there with other bytes (the fleet wrote it meanwhile);
/// - otherwise read, written with a conditional write (never replacing what the fleet wrote between
///   the look and the write), read back (size and MD5) to verify;
/// - and then looked up in the source again: gone means a purge (or a deletion) ran meanwhile, and
///   the copy is removed, so the move never resurrects what the fleet deleted (the fleet deletes
///   in the old store first, `FallbackImageStorage`).
///
/// With `dryRun` it lists and looks, and writes nothing.
public final class StorageCopy: Sendable {
    public struct Options: Sendable {
        public var dryRun = false
        /// Objects copied at once.
        public var concurrency = 8
        /// Objects listed per page.
        public var pageSize = 1000
        /// Objects larger than this are failures (held in memory while copied).
        public var maxObjectBytes = 256 << 20

        public init() {}
    }

    /// How many failures the counts name.
    public static let failureSamples = 20

    public let source: any ImageStorage
    public let destination: any ImageStorage
    public let options: Options
    private let counts = Mutex(StorageCopyCounts())

    public init(from source: any ImageStorage, to destination: any ImageStorage, options: Options = Options()) {
        self.source = source
        self.destination = destination
        self.options = options
    }

    /// The counts so far, for a progress line while `run` runs.
    public var progress: StorageCopyCounts { counts.withLock { $0 } }

    /// Copies everything; a failed object is counted and the copy goes on. Throws only when the
    /// source cannot be listed.
    public func run() async throws -> StorageCopyCounts {
        let started = ContinuousClock.now
        var cursor: String? = nil
        repeat {
            let page = try await source.list(after: cursor, limit: options.pageSize)
            counts.withLock {
                $0.listed += page.objects.count
                $0.foreign += page.foreign.count
            }
            await withTaskGroup(of: Void.self) { group in
                for (index, object) in page.objects.enumerated() {
                    if index >= options.concurrency { await group.next() }
                    group.addTask { self.count(await self.copy(object)) }
                }
            }
            cursor = page.next
            counts.withLock { $0.seconds = (ContinuousClock.now - started).seconds }
        } while cursor != nil
        return progress
    }

    enum Outcome: Equatable {
        case copied(bytes: Int)
        case skipped(bytes: Int)
        case kept
        case vanished
        case failed(String)
    }

    func copy(_ object: StoredObject) async -> Outcome {
        let key = object.key
        do {
            if let existing = try await lookUp(key, in: destination) {
                guard existing.size == object.size else { return .kept }
                let same = try await md5(of: existing, in: destination) == md5(of: object, in: source)
                return same ? .skipped(bytes: object.size) : .kept
            }
            if options.dryRun { return .copied(bytes: object.size) }
            guard object.size <= options.maxObjectBytes else {
                return .failed("\(key.relativePath): \(object.size) bytes, more than --max-object-bytes \(options.maxObjectBytes)")
            }
            let bytes = try await source.read(key, maxBytes: options.maxObjectBytes)
            do {
                try await destination.create(bytes, at: key)
            } catch StorageError.alreadyExists {
                return .kept
            }
            let written = StoredObject.md5(of: bytes)
            let stored = try await destination.info(of: key)
            let storedMD5 = try await md5(of: stored, in: destination)
            guard stored.size == bytes.count, storedMD5 == written else {
                return .failed("\(key.relativePath): read back \(stored.size) bytes (MD5 \(storedMD5)), wrote \(bytes.count) (MD5 \(written))")
            }
            guard try await source.holds(key) else {
                try await destination.delete(key)
                return .vanished
            }
            return .copied(bytes: bytes.count)
        } catch StorageError.notFound {
            // Listed, then missing in either store: only the fleet deletes (the copy removes
            // nothing but its own copy, above), and it deletes in the old store first, so the
            // object is being purged: gone from the source, and from the destination after it.
            return .vanished
        } catch {
            return .failed("\(key.relativePath): \(error)")
        }
    }

    private func count(_ outcome: Outcome) {
        counts.withLock { counts in
            switch outcome {
            case .copied(let bytes):
                counts.copied += 1
                counts.copiedBytes += bytes
            case .skipped(let bytes):
                counts.skipped += 1
                counts.skippedBytes += bytes
            case .kept: counts.kept += 1
            case .vanished: counts.vanished += 1
            case .failed(let reason):
                counts.failed += 1
                if counts.failures.count < Self.failureSamples { counts.failures.append(reason) }
            }
        }
    }

    private func lookUp(_ key: StorageKey, in store: any ImageStorage) async throws -> StoredObject? {
        do {
            return try await store.info(of: key)
        } catch StorageError.notFound {
            return nil
        }
    }

    /// The object's MD5: the store's own when it keeps one, else from its bytes.
    private func md5(of object: StoredObject, in store: any ImageStorage) async throws -> String {
        if let md5 = object.md5 { return md5 }
        return StoredObject.md5(of: try await store.read(object.key, maxBytes: options.maxObjectBytes))
    }
}
