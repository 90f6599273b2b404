public struct DependencyTotals: Sendable, Equatable {
    public let released: Int
    public let failed: Int
}
