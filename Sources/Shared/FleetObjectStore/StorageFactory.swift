import FleetHTTPClient
import FleetStorage

extension StorageLocation {
    /// The store at this location: the one factory every process that reads or writes images uses.
    public func makeImageStorage(http: any HTTPClient = CurlHTTPClient(), retry: S3RetryPolicy = S3RetryPolicy()) -> any ImageStorage {
        switch self {
        case .files(let root): FileImageStorage(root: root)
        case .s3(let settings):
            S3ImageStorage(
                client: S3Client(endpoint: settings.endpoint, credentials: settings.credentials, http: http, retry: retry),
                prefix: settings.prefix)
        }
    }
}
