/// What the flows use a device for, when a kit has more than one of a kind: which cameras
/// and microphones a duress capture records, which readers acknowledge an alert, which
/// emulator offers the duress tag. Set per device with `roles = [...]`.
public enum DeviceRole: String, Sendable, Codable, CaseIterable, Comparable {
    /// Recorded, sealed and uploaded by a duress capture (cameras and microphones).
    case evidence
    /// Its tags acknowledge a nearby alert (NFC readers).
    case ack
    /// Offers the duress tag (NFC emulators).
    case duressTag = "duress-tag"

    public static func < (lhs: DeviceRole, rhs: DeviceRole) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The roles a device of `capability` can have.
    public static func allowed(for capability: Capability) -> Set<DeviceRole> {
        switch capability {
        case .camera, .microphone: [.evidence]
        case .nfcReader: [.ack]
        case .nfcEmulator: [.duressTag]
        case .location, .speaker, .haptics, .biometrics: []
        }
    }

    /// A device's roles when the file does not say: every camera and microphone records
    /// evidence, every reader acknowledges, and the default emulator (only) offers the duress
    /// tag, since a tag offered twice would be seen twice.
    public static func defaults(for capability: Capability, isDefault: Bool) -> Set<DeviceRole> {
        capability == .nfcEmulator && !isDefault ? [] : allowed(for: capability)
    }
}

extension KitConfiguration {
    /// The name of the device a plain `[camera]` configures.
    public static let defaultDeviceName = "default"

    /// Why `name` cannot name a device (it goes into URLs, JSON and command lines as it is);
    /// nil when it can.
    public static func problem(withDeviceName name: String) -> String? {
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D || byte == 0x5F
        }
        guard allowed, (1...32).contains(name.utf8.count), name.first != "-", name.first != "_" else {
            return "\"\(TerminalText.escaped(name))\" cannot name a device: use 1 to 32 letters, digits, - or _, starting with a letter or digit"
        }
        return nil
    }
}
