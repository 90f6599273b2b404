/// The code of a failed attempt: what `jobs.errors[].code` holds, `status` shows and `jobs.list`
/// filters on. One type for the queue's boundary: the queue's own codes are beside the queue
/// (`JobErrorCode.malformedPayload`…), and each domain declares its codes beside its errors
/// (`ImageError`, `BackgroundRemovalError`, `ProviderError`). A struct, so that codes written by
/// a newer version still read.
public struct JobErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }
}

/// An error that carries its job error code: recorded with the failed attempt even when the
/// attempt is retried.
public protocol CodedError: Error {
    var code: JobErrorCode { get }
}
