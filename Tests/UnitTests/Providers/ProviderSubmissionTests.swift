import FleetSupport
import Foundation
@testable import Providers
@testable import Renders
import Testing

/// `renders.provider_submission` rows stored before the provider's state was opaque (Swift's
/// encoding of the old `falQueue`/`settled` enum) decode into the same submissions, and encode
/// back into the same JSON, so renders in flight during an upgrade are resumed and cancelled.
@Suite struct ProviderSubmissionTests {
    static let falRow = #"{"jobID":"r1","provider":"fal-fashn","state":{"falQueue":{"_0":{"cancel":"c","response":"r","status":"s"}}}}"#
    static let settledRow = #"{"jobID":"vto-1","provider":"google-vto","state":{"settled":{"_0":{"succeeded":{"_0":{"url":{"_0":"https:\/\/x\/y.jpg"}}}}}}}"#

    func sortedJSON(_ submission: ProviderSubmission) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(submission), as: UTF8.self)
    }

    @Test func aFalRowOfBeforeDecodesAsFalsRunningStateAndEncodesTheSame() throws {
        let submission = try JSONDecoder().decode(ProviderSubmission.self, from: Data(Self.falRow.utf8))
        #expect(submission.state == .falQueue(FalQueueURLs(status: "s", response: "r", cancel: "c")))
        #expect(submission.state.falQueueURLs == FalQueueURLs(status: "s", response: "r", cancel: "c"))
        #expect(!submission.state.isSettled)
        #expect(try sortedJSON(submission) == Self.falRow)
    }

    @Test func aSettledSubmissionKeepsItsShape() throws {
        let submission = try JSONDecoder().decode(ProviderSubmission.self, from: Data(Self.settledRow.utf8))
        #expect(submission.state == .settled(.succeeded(.url("https://x/y.jpg"))))
        #expect(submission.state.isSettled && submission.state.falQueueURLs == nil)
        #expect(try sortedJSON(submission) == Self.settledRow)
    }

    @Test func anotherProvidersStateIsKeptAsItsOwnJSON() throws {
        let state = JSONValue.object(["ticket": .string("t1"), "attempt": .number(2)])
        let submission = ProviderSubmission(provider: "other", jobID: "t1", state: .running(state))
        let decoded = try JSONDecoder().decode(ProviderSubmission.self, from: try JSONEncoder().encode(submission))
        #expect(decoded == submission && decoded.state.falQueueURLs == nil)
    }
}
