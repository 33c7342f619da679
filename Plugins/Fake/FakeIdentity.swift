import FieldHAL

/// What a fake device says it is: FieldHAL's simulator of its kind, its device name as the
/// serial (`device = "…"` in its section sets it), so that a bench of fakes can be told
/// apart the way real devices are.
extension DeviceIdentity {
    static func fake(_ kind: String, _ deviceName: String) -> DeviceIdentity {
        DeviceIdentity(vendor: "FieldHAL", model: "fake \(kind)", serial: deviceName)
    }
}

extension FakeBiometricAuthenticator { nonisolated var identity: DeviceIdentity? { .fake("fingerprint sensor", deviceName) } }
extension FakeCamera { nonisolated var identity: DeviceIdentity? { .fake("camera", deviceName) } }
extension FakeHapticsEngine { nonisolated var identity: DeviceIdentity? { .fake("haptics", deviceName) } }
extension FakeLocationProvider { var identity: DeviceIdentity? { .fake("GNSS receiver", deviceName) } }
extension FakeMicrophone { var identity: DeviceIdentity? { .fake("microphone", deviceName) } }
extension FakeNFCReader { nonisolated var identity: DeviceIdentity? { .fake("NFC reader", deviceName) } }
extension FakeNFCTagEmulator { nonisolated var identity: DeviceIdentity? { .fake("NFC tag emulator", deviceName) } }
extension FakeSpeaker { nonisolated var identity: DeviceIdentity? { .fake("speaker", deviceName) } }
