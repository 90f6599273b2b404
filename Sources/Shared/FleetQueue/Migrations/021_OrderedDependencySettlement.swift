import FleetPostgres

extension QueueMigrations {
    /// Dependents locked in id order before they are settled (`docs/queue.md`, "Release, in the
    /// statement that ends the dependency"), so transactions ending dependencies that share
    /// dependents queue behind each other instead of deadlocking.
    static let orderedDependencySettlement = Migration(version: 21, name: "ordered dependency settlement", sql: """
        \(DependencySettlementSQL.settleFunction(lockingInIDOrder: true))
        """)
}
