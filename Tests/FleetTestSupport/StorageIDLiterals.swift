import FleetStorage

/// Ids the tests write as literals (`store.render(id: "r1")`): a malformed one is the test's own
/// mistake, so it stops the test at once. Production code checks every id it is given.
extension StorageID: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) {
        do { try self.init(value) } catch { preconditionFailure("\(value) is no StorageID: \(error)") }
    }
}
