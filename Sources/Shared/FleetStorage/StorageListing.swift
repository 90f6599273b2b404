import Crypto
import Foundation

/// One object of a store, as a listing or a stat describes it.
public struct StoredObject: Sendable, Equatable {
    public let key: StorageKey
    public let size: Int
    /// The MD5 of its bytes (lower-case hex) when the store knows it without reading them (S3's
    /// ETag of an object stored by one PUT); nil when only reading the bytes tells.
    public let md5: String?

    public init(key: StorageKey, size: Int, md5: String?) {
        self.key = key
        self.size = size
        self.md5 = md5
    }

    /// The MD5 of `data`, as `md5` holds it.
    public static func md5(of data: Data) -> String {
        Insecure.MD5.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }
}

/// One page of a store's objects (`ImageStorage.list(after:limit:)`), in the store's own order.
public struct StoragePage: Sendable {
    public let objects: [StoredObject]
    /// Paths in the store's tree that are no fleet key (`StorageKey(relativePath:)` refuses them):
    /// listed so an operator sees them, never copied or read.
    public let foreign: [String]
    /// The cursor of the next page (`list(after:)`); nil after the last page.
    public let next: String?

    public init(objects: [StoredObject], foreign: [String], next: String?) {
        self.objects = objects
        self.foreign = foreign
        self.next = next
    }

    /// The page of `entries` (relative paths in the store's order, their sizes and MD5s when
    /// known), those that are no fleet key set apart.
    public init(listing entries: [(path: String, size: Int, md5: String?)], next: String?) {
        var objects: [StoredObject] = []
        var foreign: [String] = []
        for entry in entries {
            if let key = StorageKey(relativePath: entry.path) {
                objects.append(StoredObject(key: key, size: entry.size, md5: entry.md5))
            } else {
                foreign.append(entry.path)
            }
        }
        self.init(objects: objects, foreign: foreign, next: next)
    }
}

/// A file tree's regular files in a stable order, a page at a time without state between pages:
/// each folder's names sorted by their bytes, a folder's files before the next name. The cursor
/// is the last path of the page before; the walk descends only where paths after it can be, so
/// a page costs the folders it reads, not the whole tree. The temporary files of a write in
/// progress (`AtomicFile`) and the start check's probes are not objects and are left out.
struct FileTreeWalk {
    let root: String

    func page(after cursor: String?, limit: Int) throws(StorageFailure) -> [(path: String, size: Int, md5: String?)] {
        var found: [(path: String, size: Int, md5: String?)] = []
        let bound = cursor.map { $0.split(separator: "/", omittingEmptySubsequences: false).map(String.init) }
        try walk(folder: root, relative: "", bound: bound.map { $0[...] }, limit: limit, into: &found)
        return found
    }

    /// Appends the files of `folder` after `bound` (the cursor's remaining components; nil: all).
    private func walk(
        folder: String, relative: String, bound: ArraySlice<String>?, limit: Int, into found: inout [(path: String, size: Int, md5: String?)]
    ) throws(StorageFailure) {
        var bound = bound
        for name in try names(in: folder) where found.count < limit {
            if let first = bound?.first {
                if Self.precedes(name, first) { continue }
                if name != first { bound = nil }
            }
            let path = "\(folder)/\(name)"
            let relativePath = relative.isEmpty ? name : "\(relative)/\(name)"
            var info = stat()
            guard lstat(path, &info) == 0 else {
                if errno == ENOENT { continue }  // deleted since the folder was read
                throw StorageFailure(path: path, errno: errno, reading: true)
            }
            switch info.st_mode & Self.typeMask {
            case Self.folderType:
                let rest = bound?.dropFirst()
                try walk(folder: path, relative: relativePath, bound: rest?.isEmpty == true ? nil : rest, limit: limit, into: &found)
            case Self.fileType where bound == nil:
                found.append((relativePath, Int(info.st_size), nil))
            default:
                break  // the cursor's own file, a symbolic link, a socket: not an object
            }
            bound = nil
        }
    }

    private func names(in folder: String) throws(StorageFailure) -> [String] {
        guard let directory = opendir(folder) else {
            if errno == ENOENT || errno == ENOTDIR { return [] }
            throw StorageFailure(path: folder, errno: errno, reading: true)
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard name != ".", name != "..", !name.contains(".tmp-"), !name.hasPrefix(".fleet-probe") else { continue }
            names.append(name)
        }
        return names.sorted(by: Self.precedes)
    }

    // `st_mode`'s file type bits (S_IFMT, S_IFDIR, S_IFREG).
    private static let typeMask: mode_t = 0o170000
    private static let folderType: mode_t = 0o040000
    private static let fileType: mode_t = 0o100000

    /// Byte order, as S3 sorts its keys.
    static func precedes(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }
}
