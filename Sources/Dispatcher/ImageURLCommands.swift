import ArgumentParser
import DispatcherProtocol
import Foundation

/// `dispatcher upload …` and `dispatcher image …`: the image store's presigned URLs, for scripts
/// and for trying the backend's flow by hand (`curl -T photo.jpg` to the PUT URL).
struct UploadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "upload", abstract: "Presigned uploads straight to the image store.", subcommands: [PresignUpload.self])
}

struct ImageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "image", abstract: "Presigned URLs of a user's images.", subcommands: [ImageURL.self])
}

/// A presigned URL for people: what to send, where, until when.
private func urlTable(method: String, url: String, headers: [String: String], expiresAt: Date, extra: [(String, String)] = []) -> String {
    var table = TextTable("FIELD", "VALUE")
    for (name, value) in extra { table.append(name, value) }
    table.append("method", method)
    for (name, value) in headers.sorted(by: { $0.key < $1.key }) { table.append("header", "\(name): \(value)") }
    table.append("expires", expiresAt.formatted(.iso8601))
    return table.text + "\n" + url
}

struct PresignUpload: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "presign", abstract: "A PUT URL for one upload: {owner}/uploads/{uploadId} in the bucket (upload.presign).",
        discussion: """
            The URL is signed for exactly the given length and type, and never replaces a stored upload (412): \
            send the headers as printed (curl -X PUT -H 'Content-Type: image/jpeg' -H 'If-None-Match: *' \
            --data-binary @photo.jpg URL). Refused \
            STORAGE_NOT_PRESIGNABLE when the dispatcher's images are files, IMAGE_TOO_LARGE above the upload limit. \
            The URL is a credential until it expires: do not paste it where others read. docs/protocol.md, "Presigned URLs".
            """)
    @OptionGroup var connection: ConnectionOptions
    @Option(help: "The user whose tree the upload goes to.") var user: String?
    @Option(help: "An onboarding token instead of a user (read from the environment variable named here): its tree.") var tokenVariable: String?
    @Option(help: "The upload's id (default: the dispatcher picks one).") var uploadId: String?
    @Option(help: "image/jpeg, image/png, image/webp or image/heic.") var type: UploadPresignRequest.ContentType
    @Option(help: "The upload's exact size in bytes.") var length: Int?
    @Option(help: "A file whose size is the upload's (instead of --length).") var file: String?
    @Option(help: "How long the URL lives, 1 to 900 seconds (default 300).") var expiresIn: Int?
    @OptionGroup var format: OutputFormat

    func run() async throws {
        let token = try tokenVariable.map { name in
            guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else { throw ValidationError("\(name) is not set") }
            return value
        }
        let size: Int
        switch (length, file) {
        case (let length?, nil): size = length
        case (nil, let file?):
            guard let bytes = (try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? Int else { throw ValidationError("--file: cannot read \(file)") }
            size = bytes
        default: throw ValidationError("give exactly one of --length and --file")
        }
        let result = try await connection.send(UploadPresignRequest(
            userId: user, ephemeralToken: token, uploadId: uploadId, contentType: type, contentLength: size, expiresInSeconds: expiresIn))
        try format.print(result) { result in
            urlTable(
                method: result.method, url: result.url, headers: result.headers, expiresAt: result.expiresAt,
                extra: [("upload", result.uploadId), ("owner", result.ownerId)])
        }
    }
}

struct ImageURL: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "url", abstract: "A GET URL for one of a user's images (image.url), valid at most 15 minutes.",
        discussion: """
            KIND is body, garment, cutout, preview or render; ID the photo's, garment's or render's id. For a render, \
            USER is its user (or the tree it was made in) and it must be complete. Refused STORAGE_NOT_PRESIGNABLE \
            when the dispatcher's images are files. docs/protocol.md, "Presigned URLs".
            """)
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The image's owner: a user id, or an onboarding token's tokenId.") var user: String
    @Argument(help: "body, garment, cutout, preview or render.") var kind: ImageURLRequest.Kind
    @Argument(help: "The body photo's, garment's or render's id.") var id: String
    @Option(help: "How long the URL lives, 1 to 900 seconds (default 300).") var expiresIn: Int?
    @OptionGroup var format: OutputFormat

    func run() async throws {
        let result = try await connection.send(ImageURLRequest(userId: user, kind: kind, id: id, expiresInSeconds: expiresIn))
        try format.print(result) { urlTable(method: $0.method, url: $0.url, headers: $0.headers, expiresAt: $0.expiresAt) }
    }
}

extension UploadPresignRequest.ContentType: ExpressibleByArgument {}
extension ImageURLRequest.Kind: ExpressibleByArgument {}
