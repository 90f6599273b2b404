import FleetQueue
import Testing

/// `fleet_control`'s payloads: JSON, decoded once by its topic; the text form of the release
/// before still read; anything else refused (nil), never a crash.
@Suite struct QueueControlTests {
    private let topic = QueueChannel.control

    @Test func eventsAreJSONAndRoundTrip() {
        #expect(topic.encode(.cancel(jobID: 42, owner: "render-worker@h:1:ab")) == #"{"action":"cancel","jobId":42,"owner":"render-worker@h:1:ab"}"#)
        #expect(topic.encode(.cancel(jobID: 42, owner: nil)) == #"{"action":"cancel","jobId":42}"#)
        #expect(topic.encode(.limits) == #"{"action":"limits"}"#)
        for event in [QueueControl.cancel(jobID: 7, owner: "w/1 \"x\""), .cancel(jobID: 7, owner: nil), .limits, .pauses] {
            #expect(topic.decode(topic.encode(event)) == event)
        }
    }

    /// A worker of this release understands a dispatcher of the one before (rolling upgrade).
    @Test func theTextFormOfTheReleaseBeforeIsRead() {
        #expect(topic.decode("cancel 42 w-1") == .cancel(jobID: 42, owner: "w-1"))
        #expect(topic.decode("cancel 42 -") == .cancel(jobID: 42, owner: nil))
        #expect(topic.decode("limits") == .limits)
    }

    @Test func unknownShapesAreRefused() {
        for payload in [
            "", "cancel", "cancel x w-1", "cancel 1 w-1 extra", "pause 1 w-1", "{", "[]", "{}", #"{"action":"cancel"}"#,
            #"{"action":"cancel","jobId":"42"}"#, #"{"action":"limits","jobId":1}"#, #"{"action":"drain"}"#, "null",
        ] {
            #expect(topic.decode(payload) == nil, "\(payload)")
        }
    }
}
