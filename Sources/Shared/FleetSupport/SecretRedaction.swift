import Foundation

/// Removes credentials from text that came from elsewhere (a provider's error body may echo the
/// request's `Authorization` header, an error may carry a URL with a key in its query).
public enum SecretRedaction {
    public static let placeholder = "[redacted]"

    /// `Bearer …`, `Key …`, `Basic …` (an Authorization header's schemes), then the values of
    /// `key=`, `token:`, `"api_key": "…"` and their like; each with its replacement. Compiled per
    /// use (a failure's message, a provider's error: rare), as NSRegularExpression is not Sendable.
    private static let patterns = [
        (#"\b((?i:bearer|basic)|Key)\s+[A-Za-z0-9._~+/=:-]{6,}"#, "$1 \(placeholder)"),
        (#"(?i)\b((?:api[_-]?)?key|token|access[_-]?token|secret|password|authorization|signature|sig)("?\s*[:=]\s*"?)[^\s"',;&]{4,}"#,
         "$1$2\(placeholder)"),
    ]

    public static func redact(_ text: String) -> String {
        patterns.reduce(text) { text, pattern in
            // The patterns are constants, tested (`RenderFailureCodeTests`).
            let expression = try! NSRegularExpression(pattern: pattern.0)
            return expression.stringByReplacingMatches(in: text, range: NSRange(text.startIndex..., in: text), withTemplate: pattern.1)
        }
    }
}
