/// An error with a product error code, recorded with a failed attempt even when it is retried.
public protocol CodedError: Error {
    var code: String { get }
}
