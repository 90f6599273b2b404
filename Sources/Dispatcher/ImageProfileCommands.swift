import ArgumentParser
import FleetPostgres
import FleetRuntime
import Imaging

/// `dispatcher image-profiles`: the normalise profiles in `fleet_settings`, without SQL.
struct ImageProfilesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "image-profiles", abstract: "The image.normalize profiles: the built-in ones and those in fleet_settings.",
        discussion: "Image workers and dispatchers read them for every job: a change applies to the next one, without a restart. Needs DATABASE_URL.",
        subcommands: [List.self, SetProfile.self, Remove.self])

    static func store() throws -> StoredNormalizeProfiles {
        let settings = try FleetProcess.bootstrap()
        return StoredNormalizeProfiles(pool: settings.makePool(maxConnections: 1, applicationName: "dispatcher image-profiles"))
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Every profile a job may name, as the fleet sees it now.")

        func run() async throws {
            let profiles = try await ImageProfilesCommand.store().profiles()
            for name in profiles.names {
                let profile = profiles.byName[name]!
                let side = { (value: Int?) in value.map { "\($0)" } ?? "-" }
                let origin = NormalizeProfiles.builtIn.byName[name] == profile ? "built-in" : "fleet_settings"
                print("\(name)\tmaxWidth \(side(profile.maxWidth))\tmaxHeight \(side(profile.maxHeight))\tquality \(profile.quality)\t\(origin)")
            }
        }
    }

    struct SetProfile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "set", abstract: "Add a profile, or replace one (a built-in one too), checked before it is stored.")
        @Argument(help: "Its name: 1 to 32 characters of a-z 0-9 -.") var name: String
        @Option(help: "At most this many pixels wide (1 to 8000).") var maxWidth: Int?
        @Option(help: "At most this many pixels high (1 to 8000).") var maxHeight: Int?
        @Option(help: "JPEG quality (1 to 100).") var quality = 80

        func run() async throws {
            do {
                try await ImageProfilesCommand.store().set(name, to: NormalizeProfile(maxWidth: maxWidth, maxHeight: maxHeight, quality: quality))
            } catch NormalizeProfileError.invalid(let reason) {
                throw ValidationError(reason)  // refused before anything is stored
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a stored profile; a built-in one returns to its built-in values.")
        @Argument(help: "The profile's name.") var name: String

        func run() async throws { try await ImageProfilesCommand.store().remove(name) }
    }
}
