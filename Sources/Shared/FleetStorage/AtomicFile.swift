import Foundation

/// Writes that replace nothing until they are complete: a temporary file beside the target,
/// fsync, rename, then fsync of the folder so the rename itself survives a crash.
public enum AtomicFile {
    public static func write(_ data: Data, to path: String) throws {
        let folder = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: folder.isEmpty ? "." : folder, withIntermediateDirectories: true)
        let temporary = "\(path).tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        guard descriptor >= 0 else { throw AtomicFileError(path: path, reason: String(cString: strerror(errno))) }
        let written = data.withUnsafeBytes { bytes -> Bool in
            var offset = 0
            while offset < bytes.count {
                let count = Foundation.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                guard count > 0 else { return false }
                offset += count
            }
            return fsync(descriptor) == 0
        }
        let failure = written ? nil : String(cString: strerror(errno))
        close(descriptor)
        guard failure == nil, rename(temporary, path) == 0 else {
            let reason = failure ?? String(cString: strerror(errno))
            unlink(temporary)
            throw AtomicFileError(path: path, reason: reason)
        }
        let folderDescriptor = open(folder.isEmpty ? "." : folder, O_RDONLY)
        if folderDescriptor >= 0 {
            fsync(folderDescriptor)
            close(folderDescriptor)
        }
    }
}

public struct AtomicFileError: Error, CustomStringConvertible {
    public let path: String
    public let reason: String
    public var description: String { "cannot write \(path): \(reason)" }
}
