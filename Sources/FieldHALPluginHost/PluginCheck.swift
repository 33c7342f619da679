import FieldHAL
import FieldHALPluginProtocol
import FieldHALSystem
import Foundation

/// `fieldhal plugin check`: a manifest read and checked, the plugin started, the handshake
/// run and compared with what the manifest declares, and the plugin stopped.
public enum PluginCheck {
    /// What the plugin said about itself in `initialize`.
    public struct Handshake: Sendable, Equatable {
        public var name: String
        public var version: String
        public var protocolVersion: PluginProtocol.Version
        public var capabilities: [Capability]
        /// From the start of the process to the answer.
        public var duration: Duration
    }

    /// How long a plugin has to start and answer `initialize`: 10 s, since an interpreter's
    /// start on a busy small board takes seconds (a Python plugin on a loaded 2-CPU CI
    /// machine once took more than the 5 s this was).
    public static let handshakeTimeout = Duration.seconds(10)

    /// Runs the handshake with `manifest`'s plugin on a thread of its own; throws the first
    /// problem found, naming the plugin and saying what to do.
    public static func handshake(_ manifest: PluginManifest, timeout: Duration = handshakeTimeout) async throws -> Handshake {
        if let refusal = PluginProtocol.refusal(of: manifest.protocolVersion, plugin: manifest.name) { throw refusal }
        let wakeup = try WakeupEvent()
        let thread = DeviceThread(name: "fieldhal-plugin-\(manifest.name)")
        defer { thread.stop() }
        return try await thread.run(interrupt: { wakeup.signal() }) {
            let start = ContinuousClock.now
            let process = try PluginProcess(manifest, wakeup: wakeup)
            defer { process.stop() }
            let answer = try process.call("initialize", initializeParameters, timeout: timeout)
            let handshake = try read(answer, start: start, manifest: manifest)
            try compare(handshake, with: manifest)
            return handshake
        }
    }

    /// What the host says about itself in `initialize`.
    static var initializeParameters: JSONValue {
        .object([
            "protocol": PluginProtocol.version.json,
            "host": .object(["name": .string("fieldhal")]),
        ])
    }

    static func read(_ answer: JSONValue, start: ContinuousClock.Instant, manifest: PluginManifest) throws(FieldHALError) -> Handshake {
        func wrong(_ detail: String) -> FieldHALError {
            FieldHALError(.protocolError, subject: "plugin \(manifest.name)", detail: "its initialize answer " + detail,
                          advice: "docs/plugin-protocol.md gives the answer's fields")
        }
        guard let name = answer["name"]?.string else { throw wrong("has no \"name\" string") }
        guard let version = answer["version"]?.string else { throw wrong("has no \"version\" string") }
        guard let major = answer["protocol"]?["major"]?.integer, let minor = answer["protocol"]?["minor"]?.integer,
              major >= 0, minor >= 0, major < 1_000_000, minor < 1_000_000 else {
            throw wrong("has no \"protocol\" {\"major\", \"minor\"}")
        }
        guard let names = answer["capabilities"]?.array?.compactMap(\.string), names.count == answer["capabilities"]?.array?.count else {
            throw wrong("has no \"capabilities\" array of names")
        }
        var capabilities: [Capability] = []
        for name in names {
            guard let capability = Capability(rawValue: name) else { throw wrong("names no capability \"\(name)\"") }
            capabilities.append(capability)
        }
        return Handshake(name: name, version: version, protocolVersion: .init(major: Int(major), minor: Int(minor)),
                         capabilities: capabilities.sorted(), duration: ContinuousClock.now - start)
    }

    /// The plugin must be what its manifest says: a manifest that lies would have a
    /// configuration checked against parameters of capabilities the plugin does not serve.
    /// A handshake that names another protocol than the manifest is a disagreement, not a
    /// reason to update FieldHAL: the manifest, checked when it was read, is the contract.
    static func compare(_ handshake: Handshake, with manifest: PluginManifest) throws(FieldHALError) {
        var differences: [String] = []
        if handshake.name != manifest.name { differences.append("its name is \"\(handshake.name)\", the manifest's \"\(manifest.name)\"") }
        if handshake.version != manifest.version {
            differences.append("its version is \(handshake.version), the manifest's \(manifest.version)")
        }
        if handshake.protocolVersion != manifest.protocolVersion {
            differences.append("it speaks protocol \(handshake.protocolVersion), the manifest says \(manifest.protocolVersion)")
        }
        let declared = manifest.capabilities.keys.sorted()
        if handshake.capabilities != declared {
            differences.append("it serves " + (handshake.capabilities.isEmpty ? "nothing" : handshake.capabilities.map(\.rawValue).joined(separator: ", "))
                               + ", the manifest declares " + declared.map(\.rawValue).joined(separator: ", "))
        }
        guard differences.isEmpty else {
            throw FieldHALError(.malformedData, subject: "plugin \(manifest.name)",
                                detail: "the plugin and \(manifest.file) disagree: " + differences.joined(separator: "; "),
                                advice: "the manifest must describe the plugin it ships with: reinstall it, or tell its author")
        }
        if let refusal = PluginProtocol.refusal(of: handshake.protocolVersion, plugin: manifest.name) { throw refusal }
    }
}
