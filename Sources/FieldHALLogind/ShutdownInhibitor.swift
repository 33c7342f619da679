import CSystemd
import FieldHAL
import FieldHALSystem
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// logind's shutdown inhibitor (`systemd-inhibit --what=shutdown --mode=block`), for the
/// daemon's update hold (issue 46): while the kit's evidence may be in the making, a
/// `systemctl reboot` from an updater is refused ("operation inhibited") instead of cutting
/// a capture short. Taken and let go with the update lock, for the same window after every
/// sign-in and unlock whatever the PIN: `systemd-inhibit --list` shows it to every local
/// user, so it must not tell the verdicts apart (docs/stealth.md).
///
/// The D-Bus calls run on a thread of the inhibitor's own (they block for a round trip);
/// `take` and `release` only queue them, in order.
public final class ShutdownInhibitor: Sendable {
    private let thread = DeviceThread(name: "fieldhal-logind")
    private let held = LockedValue<Int32?>(nil)
    private let lastProblem = LockedValue<String?>(nil)
    private let logger: Logger
    private let why: String
    /// The bus's address; nil: the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, or its socket).
    private let busAddress: String?

    public init(logger: Logger, busAddress: String? = nil, why: String = "the kit's evidence may be being recorded, sealed or uploaded") {
        self.logger = logger
        self.busAddress = busAddress
        self.why = why
    }

    /// Whether a system bus is there to ask (none in a container without systemd): without
    /// one the daemon makes no inhibitor and says nothing about it.
    public static var systemBusExists: Bool {
        if let address = getenv("DBUS_SYSTEM_BUS_ADDRESS") { return address.pointee != 0 }
        return access("/run/dbus/system_bus_socket", F_OK) == 0
    }

    /// Takes and lets go of an inhibitor at once, at the daemon's start: a refusal is said
    /// then, not after the first sign-in (a line there would differ with the verdict of
    /// whichever sign-in came first).
    public func probe() {
        take()
        release()
    }

    deinit {
        thread.stop()
        if let fd = held.value { close(fd) }
    }

    /// Asks logind for a block inhibitor, unless one is held. A refusal (no logind, polkit
    /// saying no) is said once and leaves updates to the update lock alone.
    public func take() {
        _ = thread.submit { [held, lastProblem, logger, why, busAddress] in
            guard held.value == nil else { return }
            var bus: OpaquePointer?
            var error = sd_bus_error()
            defer { sd_bus_error_free(&error) }
            var result: Int32
            if let busAddress {
                result = sd_bus_new(&bus)
                if result >= 0 { result = sd_bus_set_address(bus, busAddress) }
                if result >= 0 { result = sd_bus_set_bus_client(bus, 1) }
                if result >= 0 { result = sd_bus_start(bus) }
            } else {
                result = sd_bus_open_system(&bus)
            }
            if result < 0 {
                sd_bus_flush_close_unref(bus)
            } else {
                result = fieldhal_logind_inhibit(bus, "shutdown", "FieldHAL", why, "block", &error)
                sd_bus_flush_close_unref(bus)
            }
            guard result >= 0 else {
                let said = error.message.map { String(cString: $0) } ?? SystemError.describe(-result)
                if lastProblem.withLock({ last in defer { last = said }; return last != said }) {
                    logger.warning("update hold: logind's shutdown inhibitor not taken (\(said)); updaters that wait on update.lock still wait")
                }
                return
            }
            lastProblem.withLock { $0 = nil }
            held.withLock { $0 = result }
        }
    }

    /// Lets go of the inhibitor (closing its descriptor is how logind hears it).
    public func release() {
        _ = thread.submit { [held] in
            if let fd = held.withLock({ fd in defer { fd = nil }; return fd }) { close(fd) }
        }
    }

    /// Whether an inhibitor is held now (for tests).
    public var isHeld: Bool { held.value != nil }
}
