import FleetHTTPClient
import FleetStorage

extension StorageLocation {
    /// The store at this location: the one factory every process that reads or writes images uses.
    /// With a `fallback` (`FLEET_STORAGE_FALLBACK`, while images move between stores), reads that
    /// miss here look there, and deletions reach both (`FallbackImageStorage`).
    public func makeImageStorage(
        fallback: StorageLocation? = nil, http: any HTTPClient = CurlHTTPClient(), retry: S3RetryPolicy = S3RetryPolicy()
    ) -> any ImageStorage {
        let store: any ImageStorage = switch self {
        case .files(let root): FileImageStorage(root: root)
        case .s3(let settings):
            S3ImageStorage(
                client: S3Client(endpoint: settings.endpoint, credentials: settings.credentials, http: http, retry: retry),
                prefix: settings.prefix)
        }
        guard let fallback else { return store }
        return FallbackImageStorage(primary: store, fallback: fallback.makeImageStorage(http: http, retry: retry))
    }
}
