#if NFC
import CNFC
import Dispatch
import FieldHAL
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// One libnfc reader, opened on a thread of its own: every libnfc call runs there, one at
/// a time. The reader and the tag emulator of a kit share it when they name the same
/// connection string (a chip is either initiator or target, never both at once).
///
/// Every blocking call is bounded. libnfc's own timeouts cover most (a PN532 that stops
/// answering fails the next command within 300–500 ms); a watchdog calls
/// `nfc_abort_command` on any call that outlives its bound anyway, because some calls
/// pass libnfc no timeout at all (a select with infinite retries, a driver without
/// timeouts). A cancelled task aborts the call in progress through `interrupt`.
final class LibnfcDevice: @unchecked Sendable {
    /// The configured connection string, or nil for "the first reader libnfc finds".
    let requestedConnstring: String?
    let thread: DeviceThread
    /// What the watchdog and interrupts may touch from other threads.
    private let gate = Mutex(Gate())
    private let watchdog = DispatchQueue(label: "fieldhal-libnfc-watchdog")

    // Touched only on `thread`.
    private var context: OpaquePointer?
    private var device: OpaquePointer?
    private var connstring: String
    private var chipName = ""
    private var initiatorReady = false

    private struct Gate {
        /// "PN532 v1.6 (pn532_uart:/dev/ttyUSB0)", kept here for other threads.
        var name = ""
        /// The chip and the connection string it answered on.
        var identity: DeviceIdentity?
        var device: DevicePointer?
        var call: UInt64 = 0
        var inCall = false
        var callTimedOut = false
    }

    /// The device handle, for `nfc_abort_command` from the watchdog and interrupts: libnfc
    /// documents that one call as safe from another thread. `gate` keeps it from racing
    /// `nfc_close`.
    private struct DevicePointer: @unchecked Sendable { let raw: OpaquePointer }

    /// How long a call may outlive its own timeout before the watchdog aborts it.
    static let watchdogGrace = Duration.milliseconds(500)

    private init(connstring: String?) {
        requestedConnstring = connstring
        self.connstring = connstring ?? "first libnfc reader"
        thread = DeviceThread(name: "fieldhal-libnfc")
        gate.withLock { $0.name = self.connstring }
    }

    /// Opens the reader. Fails with advice when it is missing, in use or not accessible.
    static func open(connstring: String?) async throws -> LibnfcDevice {
        let device = LibnfcDevice(connstring: connstring)
        do {
            try await device.thread.run { try device.openIfNeeded() }
        } catch {
            device.thread.stop()
            throw error
        }
        return device
    }

    /// `nfc pn532_uart:/dev/ttyUSB0`, for errors raised on the device thread (only there).
    var subject: String { "nfc \(connstring)" }

    /// "PN532 v1.6 on pn532_uart:/dev/ttyUSB0", for `status`.
    var deviceName: String { gate.withLock { $0.name } }

    // MARK: Opening and closing (device thread)

    /// libnfc prints its own errors on stderr (level 1) unless told otherwise; FieldHAL's
    /// typed errors carry what matters, and a kiosk's output must not change with what a
    /// reader does. `LIBNFC_LOG_LEVEL` set by the user wins. Set once, before any thread
    /// of ours reads the environment.
    static let quietLibnfcLog: Void = { setenv("LIBNFC_LOG_LEVEL", "0", 0) }()

    /// Opens the reader if it is not open: after a failure the next operation reopens it,
    /// so a reader unplugged and plugged back in works again without a restart.
    func openIfNeeded() throws {
        guard device == nil else { return }
        if context == nil {
            Self.quietLibnfcLog
            var created: OpaquePointer?
            nfc_init(&created)
            guard let created else {
                throw FieldHALError(.unavailable, subject: "nfc", detail: "libnfc could not initialise (out of memory?)")
            }
            context = created
        }
        guard let context else { return }
        var target = requestedConnstring
        if target == nil {
            var buffer = [CChar](repeating: 0, count: 1024)
            if fieldhal_nfc_first_device(context, &buffer, buffer.count) > 0 {
                target = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                connstring = target!
            } else {
                throw FieldHALError(.deviceNotFound, subject: "nfc", detail: "libnfc found no reader",
                                    advice: "plug a reader in, or name it in the config: connstring = \"pn532_uart:/dev/ttyUSB0\"")
            }
        }
        guard let opened = nfc_open(context, target) else { throw openFailure(target!) }
        device = opened
        chipName = Self.chip(of: opened)
        let name = chipName.isEmpty ? connstring : "\(chipName) on \(connstring)"
        let identity = Self.identity(chip: chipName.isEmpty ? String(cString: nfc_device_get_name(opened)) : chipName, connstring: connstring)
        gate.withLock { gate in
            gate.device = DevicePointer(raw: opened)
            gate.name = name
            gate.identity = identity
        }
    }

    /// What the reader is: its chip, and its connection string with a serial port's path
    /// replaced by udev's `/dev/serial/by-id` (or `by-path`) link to it when there is one, so
    /// that the same reader is found after a replug renumbers `/dev/ttyUSB*`.
    static func identity(chip: String, connstring: String) -> DeviceIdentity {
        let parts = connstring.split(separator: ":", maxSplits: 1).map(String.init)
        var link = connstring
        if parts.count == 2, parts[1].hasPrefix("/dev/"),
           let stable = DeviceIdentity.stableLink(for: parts[1], in: ["/dev/serial/by-id", "/dev/serial/by-path"]) {
            link = parts[0] + ":" + stable
        }
        let tty = URL(fileURLWithPath: parts.count == 2 ? parts[1] : "").resolvingSymlinksInPath().lastPathComponent
        let said = DeviceIdentity(model: chip, link: link)
        guard parts.count == 2, tty.hasPrefix("tty"), let usb = DeviceIdentity.usb(above: "/sys/class/tty/\(tty)/device") else { return said }
        return DeviceIdentity(vendor: usb.vendor, model: chip, serial: usb.serial, link: link)
    }

    /// What the reader said it is when it was last opened.
    var identity: DeviceIdentity? { gate.withLock { $0.identity } }

    /// "PN532 v1.6", from the first line of libnfc's device report ("chip: PN532 v1.6").
    static func chip(of device: OpaquePointer) -> String {
        var report: UnsafeMutablePointer<CChar>?
        guard nfc_device_get_information_about(device, &report) >= 0, let report else { return "" }
        defer { nfc_free(report) }
        let firstLine = String(cString: report).split(whereSeparator: \.isNewline).first ?? ""
        return firstLine.hasPrefix("chip: ") ? String(firstLine.dropFirst(6)) : ""
    }

    /// Why `nfc_open` failed, told from what the file system says about a serial port.
    private func openFailure(_ connstring: String) -> FieldHALError {
        let subject = "nfc \(connstring)"
        let path = connstring.split(separator: ":", maxSplits: 2).dropFirst().first.map(String.init)
        if let path, path.hasPrefix("/") {
            if access(path, F_OK) != 0 {
                return FieldHALError(.deviceNotFound, subject: subject, detail: "\(path) does not exist",
                                     advice: "check the reader's cable and the path (ls /dev/serial/by-id/)")
            }
            if access(path, R_OK | W_OK) != 0 {
                return FieldHALError(.permissionDenied, subject: subject, detail: "cannot open \(path) for reading and writing",
                                     advice: "add the service user to group dialout or install udev/60-fieldhal.rules")
            }
        }
        return FieldHALError(.unavailable, subject: subject, detail: "libnfc could not open the reader (missing, in use by another program, or not answering)",
                             advice: "check that no other program (pcscd, another fieldhal) holds it, then replug it")
    }

    /// Puts the chip in initiator (reader) mode, once per switch from target mode, with a
    /// finite passive activation so that a poll for an absent tag returns at once.
    func ensureInitiator() throws {
        try openIfNeeded()
        guard !initiatorReady else { return }
        try call("initiator set-up", bound: .seconds(2)) { nfc_initiator_init($0) }
        try call("initiator set-up", bound: .seconds(2)) { nfc_device_set_property_bool($0, NP_INFINITE_SELECT, false) }
        initiatorReady = true
    }

    /// Whether the libnfc device is open (device thread only).
    var isOpen: Bool { device != nil }

    /// Leaves initiator mode: the chip is about to be a target, or has just been one.
    func leaveInitiator() { initiatorReady = false }

    /// Closes the libnfc device after a failure; the next operation reopens it.
    func dropDevice() {
        initiatorReady = false
        guard let opened = device else { return }
        gate.withLock { $0.device = nil }
        nfc_close(opened)
        device = nil
    }

    /// Releases everything. Interrupts a call in progress first.
    func close() async {
        interrupt()
        _ = try? await thread.run { [self] in
            dropDevice()
            if let context { nfc_exit(context) }
            context = nil
        }
        thread.stop()
    }

    // MARK: Bounded calls (device thread)

    /// Runs one libnfc call on the open device with the watchdog armed for `bound`.
    /// A negative libnfc result becomes a typed error; an I/O error also drops the device.
    /// Result codes in `returning` come back to the caller instead of being thrown.
    @discardableResult
    func call(_ what: String, bound: Duration, returning: Set<Int32> = [], _ body: (OpaquePointer) -> Int32) throws -> Int32 {
        try openIfNeeded()
        guard let device else { throw FieldHALError(.disconnected, subject: subject, detail: "the reader is closed") }
        let call = gate.withLock { gate -> UInt64 in
            gate.call += 1
            gate.inCall = true
            gate.callTimedOut = false
            return gate.call
        }
        watchdog.asyncAfter(deadline: .now() + .nanoseconds(Int(bound.nanoseconds))) { [self] in
            gate.withLock { gate in
                guard gate.inCall, gate.call == call, let device = gate.device else { return }
                gate.callTimedOut = true
                nfc_abort_command(device.raw)
            }
        }
        let result = body(device)
        let timedOut = gate.withLock { gate -> Bool in
            gate.inCall = false
            return gate.callTimedOut
        }
        guard result < 0, !returning.contains(result) || timedOut else { return result }
        if timedOut || result == NFC_ETIMEOUT {  // the chip, not a tag, failed to answer
            dropDevice()
            let limit = timedOut ? " within \(bound.secondsDescription)" : ""
            throw FieldHALError(.timeout, subject: subject, detail: "the reader stopped answering (\(what))\(limit)",
                                advice: "replug the reader; FieldHAL reopens it on the next request")
        }
        throw error(result, during: what)
    }

    /// Aborts the call in progress, if any (from any thread).
    func interrupt() {
        gate.withLock { gate in
            if gate.inCall, let device = gate.device { nfc_abort_command(device.raw) }
        }
    }

    /// The typed error for a libnfc result code.
    func error(_ code: Int32, during what: String) -> FieldHALError {
        switch code {
        case NFC_EIO, NFC_ENOTSUCHDEV:
            dropDevice()
            return FieldHALError(.disconnected, subject: subject, detail: "I/O error during \(what): the reader is gone",
                                 advice: "check the reader's cable; FieldHAL reopens it on the next request")
        case NFC_ERFTRANS:
            return FieldHALError(.disconnected, subject: subject, detail: "the tag stopped answering during \(what) (it left the field)",
                                 advice: "hold the tag still on the reader and try again")
        case NFC_EOPABORTED:
            return FieldHALError.cancelled(subject)
        case NFC_ETGRELEASED:
            return FieldHALError(.disconnected, subject: subject, detail: "the reader released the emulated tag during \(what)")
        case NFC_EDEVNOTSUPP, NFC_ENOTIMPL:
            return FieldHALError(.unsupported, subject: subject, detail: "\(chipName.isEmpty ? "this reader" : chipName) cannot do \(what)")
        case NFC_EOVFLOW:
            return FieldHALError(.protocolError, subject: subject, detail: "the answer to \(what) overflowed its buffer")
        case NFC_ECHIP:
            return FieldHALError(.protocolError, subject: subject, detail: "the chip reported an error during \(what)")
        default:
            return FieldHALError(.protocolError, subject: subject, detail: "libnfc error \(code) during \(what)")
        }
    }
}

/// How one operation on the device thread learns that its task was cancelled: a flag it
/// checks between libnfc calls, and a wake-up for the pause between polls. The blocking
/// call itself is ended by `nfc_abort_command`.
final class OperationInterrupt: Sendable {
    private let cancelled = Atomic(false)
    let wakeup: WakeupEvent

    init() throws { wakeup = try WakeupEvent() }

    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    func cancel() {
        cancelled.store(true, ordering: .releasing)
        wakeup.signal()
    }

    /// Sleeps for `duration` unless cancelled first; returns false when cancelled.
    func pause(_ duration: Duration) -> Bool {
        _ = wakeup.wait(upTo: duration)
        return !isCancelled
    }
}

extension LibnfcDevice {
    /// Runs `job` on the device thread; cancelling the calling task interrupts it.
    /// Once cancelled, the operation reports `cancelled` whatever the aborted libnfc call
    /// returned: an abort can land mid-exchange and surface as a timeout or an I/O error.
    func operation<T: Sendable>(_ job: @escaping @Sendable (OperationInterrupt) throws -> T) async throws -> T {
        let interrupt = try OperationInterrupt()
        return try await thread.run(interrupt: { [self] in
            interrupt.cancel()
            self.interrupt()
        }) { [self] in
            do {
                return try job(interrupt)
            } catch {
                if interrupt.isCancelled { throw FieldHALError.cancelled(subject) }
                throw error
            }
        }
    }
}

/// The libnfc devices a kit has open, by connection string: the reader and the tag
/// emulator of one chip share one `LibnfcDevice` (and so one thread and one mode).
actor LibnfcDevices {
    static let shared = LibnfcDevices()

    private struct Entry {
        /// Opening runs once; a second capability that asks meanwhile awaits the same task.
        var opening: Task<LibnfcDevice, any Error>
        var users: Int
    }
    private var entries: [String: Entry] = [:]

    func acquire(_ connstring: String?) async throws -> LibnfcDevice {
        let key = connstring ?? ""
        if entries[key] == nil {
            entries[key] = Entry(opening: Task { try await LibnfcDevice.open(connstring: connstring) }, users: 0)
        }
        entries[key]!.users += 1
        let opening = entries[key]!.opening
        do {
            return try await opening.value
        } catch {
            entries[key]?.users -= 1
            if entries[key]?.users == 0 { entries[key] = nil }
            throw error
        }
    }

    func release(_ device: LibnfcDevice) async {
        for (key, entry) in entries {
            guard let opened = try? await entry.opening.value, opened === device else { continue }
            entries[key]?.users -= 1
            if entries[key]?.users == 0 {
                entries[key] = nil
                await device.close()
            }
            return
        }
    }
}

extension Duration {
    var nanoseconds: Int64 { components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000 }
    var milliseconds: Int32 { Int32(clamping: nanoseconds / 1_000_000) }
}
#endif
