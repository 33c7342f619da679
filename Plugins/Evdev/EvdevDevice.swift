#if Evdev
import CEvdev
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// An open evdev event node, for force feedback: a thin, typed layer over the ioctls and
/// `EV_FF` writes. Closed when released. One device thread owns it.
final class EvdevDevice {
    enum Feature: Hashable { case rumble, periodic, gain }

    let path: String
    let subject: String
    let name: String
    let features: Set<Feature>
    let effectSlots: Int
    private let descriptor: Int32

    init(path: String, subject: String) throws {
        self.path = path
        self.subject = subject
        let descriptor = Glibc.open(path, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { throw Self.error(errno, subject: subject, doing: "open") }
        self.descriptor = descriptor
        var bits = [UInt8](repeating: 0, count: (Int(FF_MAX) + 8) / 8)
        guard fieldhal_evdev_ff_bits(descriptor, &bits, Int32(bits.count)) >= 0 else {
            let code = errno
            Glibc.close(descriptor)
            throw Self.error(code, subject: subject, doing: "read force-feedback capabilities")
        }
        func has(_ bit: Int32) -> Bool { bits[Int(bit) / 8] & (1 << (UInt8(bit) % 8)) != 0 }
        var features: Set<Feature> = []
        if has(FF_RUMBLE) { features.insert(.rumble) }
        if has(FF_PERIODIC) { features.insert(.periodic) }
        if has(FF_GAIN) { features.insert(.gain) }
        self.features = features
        var slots: Int32 = 0
        effectSlots = fieldhal_evdev_effect_slots(descriptor, &slots) >= 0 ? Int(slots) : 0
        var nameBytes = [CChar](repeating: 0, count: 256)
        name = fieldhal_evdev_name(descriptor, &nameBytes, Int32(nameBytes.count - 1)) >= 0
            ? String(decoding: nameBytes.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : path
    }

    /// What the input device says it is: its name with the bus's vendor and product ids
    /// (EVIOCGID), its unique id (EVIOCGUNIQ: a serial, when the driver has one), the USB
    /// descriptor's vendor name, and udev's stable link.
    func identity() -> DeviceIdentity {
        var id = input_id()
        let ids = fieldhal_evdev_id(descriptor, &id) >= 0 ? "\(id.vendor.hex(width: 4)):\(id.product.hex(width: 4))" : nil
        var uniqBytes = [CChar](repeating: 0, count: 256)
        let uniq = fieldhal_evdev_uniq(descriptor, &uniqBytes, Int32(uniqBytes.count - 1)) >= 0
            ? String(decoding: uniqBytes.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : nil
        let node = URL(fileURLWithPath: path).resolvingSymlinksInPath().lastPathComponent
        let said = DeviceIdentity(vendor: ids.map { String($0.prefix(4)) }, model: ids.map { "\(name) (\($0))" } ?? name, serial: uniq,
                                  link: DeviceIdentity.stableLink(for: path, in: ["/dev/input/by-id", "/dev/input/by-path"]))
        guard let usb = DeviceIdentity.usb(above: "/sys/class/input/\(node)/device") else { return said }
        return DeviceIdentity(vendor: usb.vendor, model: said.model, serial: said.serial ?? usb.serial, link: said.link)
    }

    deinit { Glibc.close(descriptor) }

    /// Uploads the step's effect and returns the id the driver gave it.
    func upload(_ step: HapticStep) throws -> Int16 {
        var effect = ff_effect()
        effect.id = -1
        effect.replay.length = UInt16(step.durationMilliseconds)
        switch step.effect {
        case .rumble(let strong, let weak):
            guard features.contains(.rumble) else { throw missing("rumble") }
            effect.type = UInt16(FF_RUMBLE)
            effect.u.rumble.strong_magnitude = UInt16((strong * 0xFFFF).rounded())
            effect.u.rumble.weak_magnitude = UInt16((weak * 0xFFFF).rounded())
        case .periodic(let magnitude, let period):
            guard features.contains(.periodic) else { throw missing("periodic") }
            effect.type = UInt16(FF_PERIODIC)
            effect.u.periodic.waveform = UInt16(FF_SINE)
            effect.u.periodic.period = UInt16(period)
            effect.u.periodic.magnitude = Int16((magnitude * 0x7FFF).rounded())
        }
        guard fieldhal_evdev_upload(descriptor, &effect) >= 0 else {
            let code = errno
            if code == ENOSPC {
                throw FieldHALError(.unsupported, subject: subject, detail: "the device has room for \(effectSlots) effects only",
                                    advice: "use a pattern with fewer distinct steps")
            }
            throw Self.error(code, subject: subject, doing: "upload an effect")
        }
        return effect.id
    }

    func start(_ id: Int16) throws { try send(code: UInt16(bitPattern: id), value: 1, doing: "play an effect") }
    func stop(_ id: Int16) throws { try send(code: UInt16(bitPattern: id), value: 0, doing: "stop an effect") }

    /// Best effort: a device that has gone away has dropped its effects anyway.
    func erase(_ id: Int16) { _ = fieldhal_evdev_erase(descriptor, Int32(id)) }

    func setGain(_ gain: Double) throws {
        guard features.contains(.gain) else { return }
        try send(code: UInt16(FF_GAIN), value: Int32((gain * 0xFFFF).rounded()), doing: "set the gain")
    }

    private func send(code: UInt16, value: Int32, doing step: String) throws {
        var event = input_event()
        event.type = UInt16(EV_FF)
        event.code = code
        event.value = value
        let written = withUnsafeBytes(of: &event) { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        guard written == MemoryLayout<input_event>.size else { throw Self.error(errno, subject: subject, doing: step) }
    }

    private func missing(_ effect: String) -> FieldHALError {
        FieldHALError(.unsupported, subject: subject, detail: "\(name) has no \(effect) effect",
                      advice: "use a theme whose patterns use the effects the device has")
    }

    static func error(_ code: Int32, subject: String, doing step: String) -> FieldHALError {
        switch code {
        case EACCES, EPERM:
            return FieldHALError(.permissionDenied, subject: subject, detail: "permission denied",
                                 advice: "add the service user to group input or install udev/60-fieldhal.rules")
        case ENOENT, ENXIO:
            return FieldHALError(.deviceNotFound, subject: subject, detail: "no such device",
                                 advice: "check the motor's driver is loaded; /proc/bus/input/devices lists input devices")
        case ENODEV:
            return FieldHALError(.disconnected, subject: subject, detail: "\(step): the device went away",
                                 advice: "check the connection; the next pattern opens it again")
        case ENOTTY, EINVAL:
            return FieldHALError(.unsupported, subject: subject, detail: "\(step): not a force-feedback input device")
        default:
            return FieldHALError(.io, subject: subject, detail: "\(step): \(SystemError.describe(code))")
        }
    }
}
#endif
