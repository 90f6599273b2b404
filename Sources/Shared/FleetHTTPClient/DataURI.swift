import Foundation

extension Data {
    /// `data:<mime>;base64,…`, the inline form providers accept for image inputs.
    public func dataURI(mimeType: String) -> String {
        "data:\(mimeType);base64,\(base64EncodedString())"
    }
}
