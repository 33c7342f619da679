#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The kinds of hardware FieldHAL abstracts. The raw value is the configuration
/// section that chooses the capability's plugin (`[gps]`, `[nfc_emulator]`, …).
public enum Capability: String, Sendable, Codable, CaseIterable, Comparable, CustomStringConvertible {
    case nfcReader = "nfc"
    case nfcEmulator = "nfc_emulator"
    case location = "gps"
    case camera
    case microphone
    case speaker
    case haptics
    case biometrics

    public var description: String { rawValue }

    public static func < (lhs: Capability, rhs: Capability) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// What every opened device has in common: a name for messages and a way to let go.
public protocol Device: Sendable {
    /// The device as a technician would name it: `/dev/video0`, `gpsd localhost:2947`,
    /// `pn532_uart:/dev/ttyUSB0`. Used in errors and `fieldhal status`.
    var deviceName: String { get }

    /// What the device is, as it said when it was opened: nil when its backend cannot tell.
    var identity: DeviceIdentity? { get }

    /// Releases the device. Afterwards every call throws. Safe to call twice.
    func close() async
}

extension Device {
    public var identity: DeviceIdentity? { nil }
}

/// A device whose backend can fail and come back while the device stays open: a plugin
/// process that ends and is started again. Whoever holds the kit (the daemon) follows it to
/// report the device unavailable, with why, while its backend is down, and available again
/// once it serves (`capability` events). Requests still go to the device meanwhile: for a
/// request-driven plugin the next request is what starts it again.
public protocol SupervisedDevice: Device {
    /// `handler` hears why the backend is down, in a technician's words, or nil once it serves
    /// again: first how it stands now if it is down, then each change, on whichever thread
    /// saw it (it must not block).
    func followHealth(_ handler: @escaping @Sendable (String?) -> Void) -> Subscription
}

/// What a device is, beyond where it is now: the vendor, model and serial it reports, and
/// the stable address a replug or a reboot finds it under again (udev's `by-id` or
/// `by-path` link, a libnfc connstring, gpsd's device path, fprintd's device). Every field
/// is what the device or its driver said; none is guessed.
public struct DeviceIdentity: Sendable, Equatable, Codable {
    public var vendor: String?
    public var model: String?
    public var serial: String?
    public var link: String?

    public init(vendor: String? = nil, model: String? = nil, serial: String? = nil, link: String? = nil) {
        func said(_ text: String?) -> String? {
            guard let text = text?.trimmingSpace(), !text.isEmpty else { return nil }
            return text
        }
        self.vendor = said(vendor)
        self.model = said(model)
        self.serial = said(serial)
        self.link = said(link)
    }

    /// One line for a table: model, vendor and serial as far as known.
    public var summary: String {
        [model, vendor, serial.map { "serial \($0)" }].compactMap { $0 }.joined(separator: ", ")
    }
}

/// An opened capability, as a plugin hands it to the kit.
public enum CapabilityProvider: Sendable {
    case nfcReader(any NFCReader)
    case nfcEmulator(any NFCTagEmulator)
    case location(any LocationProvider)
    case camera(any Camera)
    case microphone(any Microphone)
    case speaker(any Speaker)
    case haptics(any HapticsEngine)
    case biometrics(any BiometricAuthenticator)

    public var capability: Capability {
        switch self {
        case .nfcReader: .nfcReader
        case .nfcEmulator: .nfcEmulator
        case .location: .location
        case .camera: .camera
        case .microphone: .microphone
        case .speaker: .speaker
        case .haptics: .haptics
        case .biometrics: .biometrics
        }
    }

    public var device: any Device {
        switch self {
        case .nfcReader(let device): device
        case .nfcEmulator(let device): device
        case .location(let device): device
        case .camera(let device): device
        case .microphone(let device): device
        case .speaker(let device): device
        case .haptics(let device): device
        case .biometrics(let device): device
        }
    }
}
