/// The garment categories the app offers (docs/product.md, "Garment categories"). Which of
/// them may be rendered is a server-side setting intersected with the active provider's
/// `supportedCategories`.
public enum GarmentCategory: String, CaseIterable, Codable, Hashable, Sendable {
    case tops, bottoms, dresses, shoes, outerwear
}
