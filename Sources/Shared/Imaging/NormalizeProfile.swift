import FleetPostgres
import FleetQueue
import FleetSupport
import Foundation
import LiveSettings

/// What an upload is normalised into: a bounding box (either side may be open) and a JPEG
/// quality. The rest of the pipeline (orientation, sRGB, stripped metadata) is the same for all.
public struct NormalizeProfile: Codable, Sendable, Equatable {
    /// At most this many pixels wide; nil: any width.
    public var maxWidth: Int?
    /// At most this many pixels high; nil: any height.
    public var maxHeight: Int?
    public var quality: Int

    public static let sides = 1...8000
    public static let qualities = 1...100

    public init(maxWidth: Int? = nil, maxHeight: Int? = nil, quality: Int = 80) {
        self.maxWidth = maxWidth
        self.maxHeight = maxHeight
        self.quality = quality
    }

    /// Today's (and the default) upload: at most 1200 px wide, quality 80.
    public static let upload = NormalizeProfile(maxWidth: 1200, quality: 80)
    /// The trial-room's full-height view of a body photo.
    public static let trialRoom = NormalizeProfile(maxHeight: 2000, quality: 80)
    /// Lists and pickers: within a 400 px square.
    public static let thumb = NormalizeProfile(maxWidth: 400, maxHeight: 400, quality: 75)

    /// Why this profile cannot be used, or nil.
    public var problem: String? {
        if maxWidth == nil && maxHeight == nil { return "needs maxWidth, maxHeight or both" }
        for (field, value) in [("maxWidth", maxWidth), ("maxHeight", maxHeight)] {
            if let value, !Self.sides.contains(value) { return "\(field) must be between 1 and \(Self.sides.upperBound)" }
        }
        if !Self.qualities.contains(quality) { return "quality must be between 1 and 100" }
        return nil
    }

    /// A missing quality is the upload's 80, so an operator can write `{"maxWidth": 600}`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(maxWidth: try container.decodeIfPresent(Int.self, forKey: .maxWidth),
                  maxHeight: try container.decodeIfPresent(Int.self, forKey: .maxHeight),
                  quality: try container.decodeIfPresent(Int.self, forKey: .quality) ?? 80)
    }
}

/// The named profiles a job may ask for: the built-ins, overridden or added to by the
/// `image.profiles` row of `fleet_settings` (a JSON object, name → profile).
public struct NormalizeProfiles: Sendable, Equatable {
    /// The profile of a job that names none (and of `garment.process`).
    public static let defaultName = "upload"
    public static let builtIn = NormalizeProfiles(unchecked: ["upload": .upload, "trial-room": .trialRoom, "thumb": .thumb])
    /// The `fleet_settings` key operators write.
    public static let settingsKey = "image.profiles"

    public let byName: [String: NormalizeProfile]

    private init(unchecked byName: [String: NormalizeProfile]) { self.byName = byName }

    /// The built-ins with `stored` laid over them; every name and profile checked.
    public init(overriding stored: [String: NormalizeProfile] = [:]) throws(NormalizeProfileError) {
        for (name, profile) in stored {
            guard Self.isValidName(name) else { throw .invalid("profile name \"\(name)\" must be 1 to 32 characters of a-z 0-9 -") }
            if let problem = profile.problem { throw .invalid("profile \"\(name)\": \(problem)") }
        }
        self.init(unchecked: Self.builtIn.byName.merging(stored) { _, stored in stored })
    }

    public var names: [String] { byName.keys.sorted() }

    /// The profile called `name` (nil: the default).
    public func profile(named name: String?) throws(NormalizeProfileError) -> NormalizeProfile {
        let name = name ?? Self.defaultName
        guard let profile = byName[name] else { throw .unknown(name, known: names) }
        return profile
    }

    /// `[a-z0-9-]{1,32}`: names travel in payloads, logs and command lines unquoted.
    public static func isValidName(_ name: String) -> Bool {
        (1...32).contains(name.utf8.count) && name.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
    }
}

public enum NormalizeProfileError: Error, CustomStringConvertible, Sendable, Equatable {
    /// A job named a profile nobody defined.
    case unknown(String, known: [String])
    /// The stored profiles do not decode or break a limit.
    case invalid(String)

    public var description: String {
        switch self {
        case .unknown(let name, let known): "unknown image profile \"\(name)\" (known: \(known.joined(separator: ", ")))"
        case .invalid(let reason): "\(NormalizeProfiles.settingsKey) in fleet_settings: \(reason)"
        }
    }
}

extension JobErrorCode {
    /// `image.normalize` named a profile that is neither built in nor in `fleet_settings`.
    public static let imageProfileUnknown = Self(rawValue: "IMAGE_PROFILE_UNKNOWN")
}

/// Where the profiles come from: `fleet_settings` in the fleet, fixed values in tests and the CLI.
public protocol NormalizeProfileSource: Sendable {
    func profiles() async throws -> NormalizeProfiles
}

extension NormalizeProfiles: NormalizeProfileSource {
    public func profiles() -> NormalizeProfiles { self }
}

/// The profiles in the live settings (`fleet_settings`), read again on every call (one indexed
/// row: nothing next to a normalise), so an operator's change applies to the next job without a
/// restart.
public struct StoredNormalizeProfiles: NormalizeProfileSource {
    let settings: LiveSettings

    public init(pool: PostgresPool) { self.settings = LiveSettings(pool: pool) }

    public func profiles() async throws -> NormalizeProfiles {
        guard let text = try await settings.values(of: [NormalizeProfiles.settingsKey])[NormalizeProfiles.settingsKey] else { return .builtIn }
        let stored: [String: NormalizeProfile]
        do {
            stored = try JSONDecoder().decode([String: NormalizeProfile].self, from: Data(text.utf8))
        } catch {
            throw NormalizeProfileError.invalid("not a JSON object of profiles ({\"name\": {\"maxWidth\", \"maxHeight\", \"quality\"}})")
        }
        return try NormalizeProfiles(overriding: stored)
    }

    /// Adds or replaces one profile (`dispatcher image-profiles set`), checked first. One
    /// statement, so two operators setting different profiles at once both keep theirs.
    public func set(_ name: String, to profile: NormalizeProfile) async throws {
        _ = try NormalizeProfiles(overriding: [name: profile])
        let json = String(decoding: try JSONEncoder().encode([name: profile]), as: UTF8.self)
        try await settings.merge(json, into: NormalizeProfiles.settingsKey)
    }

    /// Removes a stored profile; a built-in one returns to its built-in values.
    public func remove(_ name: String) async throws {
        try await settings.remove(member: name, from: NormalizeProfiles.settingsKey)
    }
}
