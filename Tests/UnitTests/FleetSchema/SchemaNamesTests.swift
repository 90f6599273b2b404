@testable import CallbackSchema
import FleetQueue
import FleetSchema
@testable import RenderSchema
import Testing

/// The names trigger SQL writes into the database come from the Swift constants of their owners.
@Suite struct SchemaNamesTests {
    @Test func triggersEnqueueTheCallbackKindAndWakeTheQueuesChannel() {
        #expect(RenderMigrations.callbackKind == JobKind.callbackDeliver)
        #expect(RenderMigrations.purgeKind == JobKind.accountPurge)
        #expect(CallbackMigrations.callbackKind == JobKind.callbackDeliver)
        let notifying = FleetSchema.migrations.filter { $0.sql.contains("pg_notify(") }
        let triggers = notifying.filter { $0.sql.contains("_enqueue_callback()") }
        // The jobs' and the renders' callback functions (7), the jobs' again (10), the renders' again
        // (11, 19 with the garment input, 23 with the failure's reason and 24 with the retries).
        #expect(triggers.count == 7)
        for migration in triggers {
            #expect(migration.sql.contains("PERFORM pg_notify('\(QueueChannel.jobs.name)', '\(JobKind.callbackDeliver.rawValue)');"), "\(migration.version)")
        }
        // The dependencies' settlement (17, then set-based in 18, locking in id order in 21):
        // released jobs' kinds, and the ends of failed dependents.
        // And the purges migration 22 enqueues wake the image workers.
        #expect(notifying.filter { !$0.sql.contains("_enqueue_callback()") }.map(\.version) == [17, 18, 21, 22])
        let purges = notifying.first { $0.version == 22 }?.sql ?? ""
        #expect(purges.contains("pg_notify('\(QueueChannel.jobs.name)', '\(JobKind.accountPurge.rawValue)')"))
        for version in [17, 18, 21] {
            let dependencies = notifying.first { $0.version == version }?.sql ?? ""
            #expect(dependencies.contains("pg_notify('\(QueueChannel.jobs.name)', kind)"), "\(version)")
            #expect(dependencies.contains("pg_notify('\(QueueChannel.finished.name)', ids)"), "\(version)")
        }
    }
}
