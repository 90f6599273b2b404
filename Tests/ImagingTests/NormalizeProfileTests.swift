import FleetPostgres
@testable import FleetTestSupport
import Foundation
@testable import Imaging
import Testing

/// The named profiles: their checks, and `fleet_settings` as the fleet reads it.
@Suite struct NormalizeProfileTests {
    @Test func theBuiltInsAndTheDefault() throws {
        #expect(NormalizeProfiles.builtIn.names == ["thumb", "trial-room", "upload"])
        // `upload` is what every normalise did before profiles: at most 1200 wide, quality 80.
        #expect(try NormalizeProfiles.builtIn.profile(named: nil) == NormalizeProfile(maxWidth: 1200, maxHeight: nil, quality: 80))
        #expect(ImageNormalizer().profile == .upload)
        #expect(try NormalizeProfiles.builtIn.profile(named: "trial-room") == NormalizeProfile(maxHeight: 2000, quality: 80))
        #expect(try NormalizeProfiles.builtIn.profile(named: "thumb") == NormalizeProfile(maxWidth: 400, maxHeight: 400, quality: 75))
        #expect(throws: NormalizeProfileError.unknown("poster", known: ["thumb", "trial-room", "upload"])) {
            try NormalizeProfiles.builtIn.profile(named: "poster")
        }
        #expect("\(NormalizeProfileError.unknown("poster", known: ["thumb", "upload"]))" == #"unknown image profile "poster" (known: thumb, upload)"#)
    }

    @Test func storedProfilesAreAddedOrReplaceBuiltInsAndAreChecked() throws {
        let profiles = try NormalizeProfiles(overriding: ["thumb": NormalizeProfile(maxWidth: 300, maxHeight: 300, quality: 70),
                                                          "poster": NormalizeProfile(maxWidth: 8000, quality: 100)])
        #expect(profiles.names == ["poster", "thumb", "trial-room", "upload"])
        #expect(try profiles.profile(named: "thumb").maxWidth == 300)
        let refused: [(String, NormalizeProfile, String)] = [
            ("Big", NormalizeProfile(maxWidth: 10), #"profile name "Big" must be 1 to 32 characters of a-z 0-9 -"#),
            ("", NormalizeProfile(maxWidth: 10), #"profile name "" must be 1 to 32 characters of a-z 0-9 -"#),
            (String(repeating: "a", count: 33), NormalizeProfile(maxWidth: 10), "profile name \"\(String(repeating: "a", count: 33))\" must be 1 to 32 characters of a-z 0-9 -"),
            ("a_b", NormalizeProfile(maxWidth: 10), #"profile name "a_b" must be 1 to 32 characters of a-z 0-9 -"#),
            ("open", NormalizeProfile(quality: 80), #"profile "open": needs maxWidth, maxHeight or both"#),
            ("wide", NormalizeProfile(maxWidth: 8001), #"profile "wide": maxWidth must be between 1 and 8000"#),
            ("flat", NormalizeProfile(maxHeight: 0), #"profile "flat": maxHeight must be between 1 and 8000"#),
            ("lossy", NormalizeProfile(maxWidth: 10, quality: 0), #"profile "lossy": quality must be between 1 and 100"#),
            ("fine", NormalizeProfile(maxWidth: 10, quality: 101), #"profile "fine": quality must be between 1 and 100"#),
        ]
        for (name, profile, reason) in refused {
            #expect(throws: NormalizeProfileError.invalid(reason)) { try NormalizeProfiles(overriding: [name: profile]) }
        }
        #expect(NormalizeProfiles.isValidName(String(repeating: "a", count: 32)) && NormalizeProfiles.isValidName("trial-room-2"))
        // A missing quality is the upload's.
        #expect(try JSONDecoder().decode(NormalizeProfile.self, from: Data(#"{"maxWidth":600}"#.utf8)) == NormalizeProfile(maxWidth: 600, quality: 80))
    }

    @Test func fleetSettingsAreReadOnEveryCall() async throws {
        let database = try await TestQueue.make()
        let stored = StoredNormalizeProfiles(pool: database.pool)
        // No row: the built-ins.
        #expect(try await stored.profiles() == .builtIn)
        try await stored.set("poster", to: NormalizeProfile(maxWidth: 1600, quality: 90))
        try await stored.set("thumb", to: NormalizeProfile(maxWidth: 200, maxHeight: 200))
        let both = try await stored.profiles()
        #expect(both.names == ["poster", "thumb", "trial-room", "upload"])
        #expect(try both.profile(named: "poster") == NormalizeProfile(maxWidth: 1600, quality: 90))
        #expect(try both.profile(named: "thumb") == NormalizeProfile(maxWidth: 200, maxHeight: 200, quality: 80))
        // Removing a stored built-in brings its built-in values back.
        try await stored.remove("thumb")
        #expect(try await stored.profiles().profile(named: "thumb") == .thumb)
        // What set refuses is never stored.
        await #expect(throws: NormalizeProfileError.self) { try await stored.set("huge", to: NormalizeProfile(maxWidth: 9000)) }
        #expect(try await stored.profiles().names == ["poster", "thumb", "trial-room", "upload"])
        // An operator's SQL, as docs/configuration.md shows it, is read by the next call.
        try await database.pool.query(#"UPDATE fleet_settings SET value = '{"banner": {"maxWidth": 1920, "maxHeight": 600, "quality": 85}}' WHERE key = 'image.profiles'"#)
        #expect(try await stored.profiles().profile(named: "banner") == NormalizeProfile(maxWidth: 1920, maxHeight: 600, quality: 85))
        #expect(try await stored.profiles().byName["poster"] == nil)
        // A broken row is reported as the operator's error, naming the key.
        try await database.pool.query(#"UPDATE fleet_settings SET value = '{"banner": {"maxWidth": 0}}' WHERE key = 'image.profiles'"#)
        await #expect(throws: NormalizeProfileError.invalid(#"profile "banner": maxWidth must be between 1 and 8000"#)) { try await stored.profiles() }
        try await database.pool.query(#"UPDATE fleet_settings SET value = '["thumb"]' WHERE key = 'image.profiles'"#)
        await #expect(throws: NormalizeProfileError.self) { try await stored.profiles() }
    }
}
