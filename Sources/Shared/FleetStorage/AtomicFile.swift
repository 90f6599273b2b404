import Foundation

/// Writes that replace nothing until they are complete: a temporary file beside the target,
/// fsync, rename, then fsync of the folder so the rename itself survives a crash. A write that
/// fails removes its temporary file, so nothing partial is ever visible (a full disk included:
/// unlinking needs no space).
public enum AtomicFile {
    /// Writes `data` at `path`. With `replacing` false an existing file stays as it is and the
    /// answer is false (a hard link from the complete temporary file, which fails on a name taken).
    @discardableResult
    public static func write(_ data: Data, to path: String, replacing: Bool = true) throws(StorageFailure) -> Bool {
        let folder = (path as NSString).deletingLastPathComponent
        try makeFolders(folder.isEmpty ? "." : folder, for: path)
        let temporary = "\(path).tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        guard descriptor >= 0 else { throw StorageFailure(path: path, errno: errno) }
        let written = data.withUnsafeBytes { bytes -> Bool in
            var offset = 0
            while offset < bytes.count {
                let count = Foundation.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                guard count > 0 else { return false }
                offset += count
            }
            return fsync(descriptor) == 0
        }
        let failure = written ? nil : errno
        // A failed close may be the first report of a deferred write error (network filesystems).
        let closed = close(descriptor) == 0 ? nil : errno
        guard failure == nil, closed == nil, replacing ? rename(temporary, path) == 0 : link(temporary, path) == 0 else {
            let code = failure ?? closed ?? errno
            unlink(temporary)
            if !replacing && code == EEXIST { return false }
            throw StorageFailure(path: path, errno: code)
        }
        if !replacing { unlink(temporary) }
        let folderDescriptor = open(folder.isEmpty ? "." : folder, O_RDONLY)
        if folderDescriptor >= 0 {
            fsync(folderDescriptor)
            close(folderDescriptor)
        }
        return true
    }

    /// `mkdir -p`, failing with the errno that stopped it (FileManager's errors hide it).
    private static func makeFolders(_ folder: String, for path: String) throws(StorageFailure) {
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: folder, isDirectory: &isFolder), isFolder.boolValue { return }
        let parent = (folder as NSString).deletingLastPathComponent
        if !parent.isEmpty && parent != folder { try makeFolders(parent, for: path) }
        guard mkdir(folder, 0o755) == 0 || errno == EEXIST else { throw StorageFailure(path: path, errno: errno) }
    }
}
