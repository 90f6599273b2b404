import FleetStorage
import FleetSupport
import Foundation
import Imaging
import Providers
import Renders

/// What the chaos run's workers must have stored, made here by the same code from the same
/// inputs, and the check of every stored output against it: read back through the store (the
/// gateway, with a bucket), decoded whole, of the expected size, byte-equal.
struct ChaosOutputs {
    struct Expected {
        let bytes: Data
        let size: DecodedSize
    }

    /// A normalised upload (body photo or garment photo).
    let normalised: Expected
    let cutout: Expected
    let preview: Expected
    /// The `local` provider's composite of the render's body photo and garment, stored the
    /// fleet's way.
    let render: Expected

    /// From the upload every image job reads, and the body photo and garment every render uses.
    static func expected(upload: Data, renderBody: Data, renderGarment: Data) async throws -> ChaosOutputs {
        let uploadFile = NSTemporaryDirectory() + "fleet-chaos-upload-\(getpid())"
        try AtomicFile.write(upload, to: uploadFile)
        defer { unlink(uploadFile) }
        let normalised = try ImageNormalizer().normalize(path: uploadFile)
        let cutout = try CutoutComposer().compose(photo: normalised.jpeg, cutout: try await LocalBackgroundRemover().cutout(of: normalised.jpeg))
        let submission = try await LocalTryOnProvider().submit(TryOnRequest(
            person: TryOnImage(bytes: renderBody), garment: TryOnImage(bytes: renderGarment), category: .tops))
        guard case .settled(.succeeded(.bytes(let composite, _))) = submission.state else {
            throw BenchError("the local provider did not settle with bytes: \(submission.state)")
        }
        let render = try RenderImage.normalize(composite)
        return ChaosOutputs(
            normalised: Expected(bytes: normalised.jpeg, size: DecodedSize(width: normalised.width, height: normalised.height)),
            cutout: Expected(bytes: cutout.png, size: DecodedSize(width: cutout.width, height: cutout.height)),
            preview: Expected(bytes: cutout.preview, size: DecodedSize(width: cutout.width, height: cutout.height)),
            render: Expected(bytes: render, size: try DecodedSize(decoding: render)))
    }

    /// Outputs of one kind: how many were looked for, how many matched, and the first mismatches.
    struct Tally {
        let kind: String
        var expected = 0
        var matched = 0
        var problems: [String] = []

        var line: String { "\(kind) \(matched)/\(expected)" }
    }

    /// Reads each key from `storage` and compares it with `expected`.
    static func check(_ kind: String, keys: [StorageKey], against expected: Expected, in storage: any ImageStorage) async -> Tally {
        var tally = Tally(kind: kind, expected: keys.count)
        for key in keys {
            do {
                let bytes = try await storage.read(key, maxBytes: ImageLimits().maxBytes)
                let size = try DecodedSize(decoding: bytes)
                if size != expected.size {
                    tally.problems.append("\(key.relativePath): \(size), expected \(expected.size)")
                } else if bytes != expected.bytes {
                    tally.problems.append("\(key.relativePath): \(bytes.count) bytes differ from the \(expected.bytes.count) made here")
                } else {
                    tally.matched += 1
                }
            } catch {
                tally.problems.append("\(key.relativePath): \(error)")
            }
        }
        return tally
    }
}
