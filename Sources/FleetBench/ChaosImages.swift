import ArgumentParser
import FleetObjectStore
import FleetStorage
import FleetSupport
import Foundation

/// `fleet-bench chaos --storage`: where the workers keep images.
enum ChaosStorageChoice: String, ExpressibleByArgument, CaseIterable {
    /// One folder every process shares, as hosts sharing a disk would.
    case files
    /// The bucket `FLEET_STORAGE=s3://…` names (the `AWS_*` variables), and no shared disk.
    case s3
}

/// Where the fleet started by `Fleet` keeps its images, and what that asks of each process.
enum FleetImages {
    /// One folder every process reads and writes.
    case files(root: String)
    /// A bucket of an S3-compatible gateway at `endpoint` (as this machine reaches it). Image and
    /// render workers each run in a mount namespace of their own with an empty tmpfs over
    /// `scratch`, their TMPDIR and files root: they share no disk with anyone, so what one wrote,
    /// another reads only through the gateway.
    case bucket(StorageLocation, endpoint: String, scratch: String)

    /// The workers whose images must not pass through a shared disk.
    static let isolatedExecutables: Set<String> = ["image-worker", "render-worker"]

    /// From `--storage`: files under `root`, or the bucket the environment names, with the
    /// private scratch folders mounted over `root/scratch` (created here, and left empty).
    static func choose(_ choice: ChaosStorageChoice, root: String, environment: [String: String]) throws -> FleetImages {
        switch choice {
        case .files:
            return .files(root: root)
        case .s3:
            let location = try StorageLocation.load(from: environment)
            guard case .s3 = location, let endpoint = environment["AWS_ENDPOINT_URL_S3"], !endpoint.isEmpty else {
                throw ValidationError("--storage s3 needs FLEET_STORAGE=s3://bucket/prefix and AWS_ENDPOINT_URL_S3 (scripts/chaos.sh --storage s3 sets them)")
            }
            let scratch = root + "/scratch"
            try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            return .bucket(location, endpoint: endpoint, scratch: scratch)
        }
    }

    /// The store as this process (the bench, on this machine) reads and writes it.
    func store() -> any ImageStorage {
        switch self {
        case .files(let root): FileImageStorage(root: root)
        case .bucket(let location, _, _): location.makeImageStorage()
        }
    }

    var summary: String {
        switch self {
        case .files(let root): "files at \(root), shared by every process"
        case .bucket(let location, _, _): "\(location.summary), no disk shared"
        }
    }

    /// Sets the storage variables of `executable` on a host that reaches this machine at `address`.
    func configure(_ environment: inout [String: String], for executable: String, reachingThisMachineAt address: String) {
        switch self {
        case .files(let root):
            environment["FLEET_STORAGE"] = nil
            environment["FLEET_STORAGE_ROOT"] = root
        case .bucket(_, let endpoint, let scratch):
            // The gateway listens on the host ends of the links as on loopback (scripts/chaos.sh).
            environment["AWS_ENDPOINT_URL_S3"] = endpoint.replacingOccurrences(of: "127.0.0.1", with: address)
            if Self.isolatedExecutables.contains(executable) {
                environment["FLEET_STORAGE_ROOT"] = scratch + "/images"
                environment["TMPDIR"] = scratch
            }
        }
    }

    /// The command line that runs `command` (executable first) as `executable` needs: with a
    /// bucket, an image or render worker starts in a new mount namespace over an empty tmpfs of
    /// its own. `unshare` and `sh` exec in place, so the pid is the worker's (SIGKILL reaches it).
    func command(_ command: [String], for executable: String) -> [String] {
        guard case .bucket(_, _, let scratch) = self, Self.isolatedExecutables.contains(executable) else { return command }
        let mountThenRun = #"mount -t tmpfs -o size=256m,mode=0700 "# + Self.scratchSource + #" "$0" && exec "$@""#
        return ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", mountThenRun, scratch] + command
    }

    /// How many of `pids` (running isolated workers) have a tmpfs of this run over the scratch
    /// folder, and in how many distinct mount namespaces: with a bucket both must be all of them.
    /// Read from /proc/PID/mountinfo and /proc/PID/ns/mnt, as the kernel has them. Nil with files.
    func privateScratches(of pids: [pid_t]) -> (privateTmpfs: Int, namespaces: Int)? {
        guard case .bucket(_, _, let scratch) = self else { return nil }
        let mountPoint = URL(fileURLWithPath: scratch).resolvingSymlinksInPath().path
        var privateTmpfs = 0
        var namespaces: Set<String> = []
        for pid in pids {
            guard let mounts = try? String(contentsOfFile: "/proc/\(pid)/mountinfo", encoding: .utf8) else { continue }
            // "id parent dev root MOUNTPOINT options... - FSTYPE SOURCE superoptions"
            let mounted = mounts.split(separator: "\n").contains { line in
                let fields = line.split(separator: " ").map(String.init)
                guard fields.count > 4, fields[4] == mountPoint, let dash = fields.firstIndex(of: "-"), dash + 2 < fields.count else { return false }
                return fields[dash + 1] == "tmpfs" && fields[dash + 2] == Self.scratchSource
            }
            if mounted { privateTmpfs += 1 }
            if let namespace = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/ns/mnt") { namespaces.insert(namespace) }
        }
        return (privateTmpfs, namespaces.count)
    }

    /// The tmpfs's source name, to tell this run's mounts in mountinfo.
    static let scratchSource = "fleet-chaos-scratch"

    /// Files under the shared scratch folder as this machine sees it: 0 unless a worker wrote
    /// past its private tmpfs. Nil with files (nothing is private).
    func filesLeftInScratch() -> Int? {
        guard case .bucket(_, _, let scratch) = self else { return nil }
        return FileManager.default.enumerator(atPath: scratch)?.allObjects.count ?? 0
    }
}
