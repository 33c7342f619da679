import FieldHAL

/// The protocol between FieldHAL and a plugin process (docs/plugin-protocol.md): JSON-RPC
/// 2.0, one message per line, on the plugin's standard input and output.
public enum PluginProtocol {
    public struct Version: Sendable, Equatable, Comparable, CustomStringConvertible {
        public var major: Int
        public var minor: Int

        public init(major: Int, minor: Int) {
            self.major = major
            self.minor = minor
        }

        public var description: String { "\(major).\(minor)" }

        /// As messages and manifests carry it: `{"major": 1, "minor": 0}`.
        public var json: JSONValue { .object(["major": .integer(Int64(major)), "minor": .integer(Int64(minor))]) }

        public static func < (lhs: Version, rhs: Version) -> Bool {
            (lhs.major, lhs.minor) < (rhs.major, rhs.minor)
        }
    }

    /// What this FieldHAL speaks. A minor adds methods and optional fields only; a major
    /// changes or removes something.
    public static let version = Version(major: 1, minor: 6)

    /// Since 1.4 a recording's descriptor may be the file to write itself (`"into": "file"`),
    /// not only a directory to write it in: evidence recorded into memory.
    public static let recordingIntoFile = Version(major: 1, minor: 4)

    /// A step of a running request, from the plugin: `{"id": the request's id, "value": …}`
    /// (protocol 1.2; an enrollment's stages). The host hands each to the request's caller,
    /// in order, before the answer; one for a request that has ended is ignored.
    public static let progress = "$/progress"

    /// The longest message either side may send (a line, without its newline). Bulk data
    /// (frames, PCM) does not travel in messages.
    public static let maximumMessage = 1 << 20

    /// The protocol from which the host serves `capability` from a plugin ("in force since"
    /// in docs/plugin-protocol.md): a manifest that declares it with an older protocol is
    /// refused at `fieldhal plugins`, `plugin check` and open alike.
    public static func since(_ capability: Capability) -> Version {
        switch capability {
        case .location: Version(major: 1, minor: 0)
        case .nfcReader, .nfcEmulator, .haptics: Version(major: 1, minor: 1)
        case .biometrics: Version(major: 1, minor: 2)
        case .camera, .microphone, .speaker: Version(major: 1, minor: 3)
        }
    }

    /// Why a plugin speaking `other` cannot be used by this host, or nil when it can: the
    /// majors must match; any minor works (each side uses what both know: the host tells
    /// its version in `initialize`).
    public static func refusal(of other: Version, plugin: String) -> FieldHALError? {
        guard other.major != version.major else { return nil }
        let newer = other.major > version.major
        return FieldHALError(
            .unsupported, subject: "plugin \(plugin)",
            detail: "speaks plugin protocol \(other); this FieldHAL speaks \(version)",
            advice: newer ? "update FieldHAL, or install a release of the plugin for protocol \(version.major).x"
                          : "update the plugin to protocol \(version.major).x")
    }
}
