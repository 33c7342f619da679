import FieldHAL
import FieldHALAPI
import FieldHALServer
import Testing

/// Grants that name devices (issue 43): a kiosk allowed only the front reader is refused the
/// others, with advice that gives the grant which would allow it; a grant that names a device
/// the configuration lacks stops the configuration (exit 78), not the request.
@Suite("Device grants")
struct DeviceGrantTests {
    static let kiosk = PeerCredentials(pid: 1, uid: 4242, gid: 4242, groups: [])

    static func grants(_ devices: [String], configured: Set<String>? = ["nfc.front", "nfc.back", "camera.default"]) throws -> APIAuthorisation {
        let grant: [String: ConfigValue] = [
            "user": .string("4242"),
            "allow": .array([.string("nfc.read"), .string("camera")]),
            "devices": .array(devices.map { .string($0) }),
        ]
        return try APIAuthorisation(settings: PluginParameters(["grants": .array([.table(grant)])]), configurationFile: "kiosk.toml",
                                    serviceUID: 0, configuredDevices: configured)
    }

    @Test func aGrantNamingADeviceAllowsItAndRefusesItsSiblings() throws {
        let authorisation = try Self.grants(["nfc.front"])
        #expect(authorisation.refusal(.nfcRead, for: Self.kiosk, doing: "POST /v1/nfc/read", device: DeviceKey(.nfcReader, "front")) == nil)
        let refused = try #require(authorisation.refusal(.nfcRead, for: Self.kiosk, doing: "POST /v1/nfc/read", device: DeviceKey(.nfcReader, "back")))
        #expect(refused.status == 403 && refused.detail.contains("not nfc.back"), "\(refused)")
        #expect(refused.advice?.contains(#"devices = ["nfc.back"]"#) == true, "\(refused)")
        // The grant names no camera: every camera stays allowed.
        #expect(authorisation.refusal(.camera, for: Self.kiosk, doing: "GET /v1/camera/photo", device: DeviceKey(.camera, "default")) == nil)
        // Nor does it give what it does not allow, on any device.
        #expect(authorisation.refusal(.nfcWrite, for: Self.kiosk, doing: "POST /v1/nfc/write", device: DeviceKey(.nfcReader, "front")) != nil)
        // Root and the daemon's user are never limited.
        let root = PeerCredentials(pid: 1, uid: 0, gid: 0, groups: [])
        #expect(authorisation.refusal(.nfcRead, for: root, doing: "POST /v1/nfc/read", device: DeviceKey(.nfcReader, "back")) == nil)
    }

    /// A `use` event goes to a caller who could have made the request: the kiosk sees the
    /// stills of the camera it may use, not the writes to the reader it may only read, nor
    /// the fingerprint sensor's answers.
    @Test func aUseIsSeenByWhoMayMakeIt() throws {
        let authorisation = try Self.grants(["nfc.front", "camera.default"])
        #expect(authorisation.maySee(DeviceUse(.cameraPhoto, device: "default", milliseconds: 40), Self.kiosk))
        #expect(!authorisation.maySee(DeviceUse(.nfcWrite, device: "front", milliseconds: 40), Self.kiosk))
        #expect(!authorisation.maySee(DeviceUse(.biometricsVerify, device: "default", milliseconds: 40), Self.kiosk))
        #expect(authorisation.maySee(DeviceUse(.biometricsVerify, device: "default", milliseconds: 40), PeerCredentials(pid: 1, uid: 0, gid: 0, groups: [])))
    }

    @Test(arguments: [(["nfc.side"], "no device nfc.side in this configuration; its devices: camera.default, nfc.back, nfc.front"),
                      (["front"], "is not a device: write it as capability.name"),
                      (["nfc.bad name"], "is not a device")])
    func aGrantNamingADeviceTheKitLacksIsAConfigurationError(devices: [String], message: String) {
        do {
            _ = try Self.grants(devices)
            Issue.record("accepted \(devices)")
        } catch let error as ConfigError {
            #expect(error.key == "api.grants[0]" && error.message.contains(message), "\(error)")
        } catch {
            Issue.record("\(error)")
        }
    }
}
