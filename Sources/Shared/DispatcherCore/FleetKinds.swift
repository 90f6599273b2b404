import FleetCallbacks
import FleetQueue
import Imaging
import Renders

/// Every kind of job the fleet runs, from the modules that declare them: what the dispatcher's
/// `enqueue` and schedule accept, what the sweeper keeps, what the gauges report.
public enum FleetKinds {
    public static let all = KnownKinds([
        NormalizeImagePayload.self, GarmentCutoutPayload.self, PurgeAccountPayload.self,
        RenderRunPayload.self,
        CallbackDeliveryPayload.self, HTTPRequestPayload.self,
        DrillNoop.self, DrillScript.self,
    ])
}
