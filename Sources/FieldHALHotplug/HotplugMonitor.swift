#if Hotplug
import CUdev
#endif
import FieldHAL
import FieldHALSystem
#if canImport(Glibc)
import Glibc
#endif

/// A device appearing, going or changing, as udev reports it.
public struct HotplugEvent: Sendable, Equatable {
    public enum Action: String, Sendable { case add, remove, change, bind, unbind, other }

    public var action: Action
    public var subsystem: String
    /// `/dev/input/event5`; nil for devices without a node (a USB interface).
    public var node: String?
    public var syspath: String
    /// udev's links to the node (`/dev/v4l/by-id/…`): what a configuration names to find
    /// the same device after a replug. Empty when the events come from the kernel itself.
    public var links: [String]
    /// udev's identity properties: ID_VENDOR_ID, ID_MODEL_ID, ID_SERIAL, ID_PATH.
    public var identity: [String: String]

    public init(action: Action, subsystem: String, node: String?, syspath: String = "", links: [String] = [], identity: [String: String] = [:]) {
        self.action = action
        self.subsystem = subsystem
        self.node = node
        self.syspath = syspath
        self.links = links
        self.identity = identity
    }
}

/// Follows devices as they come and go: libudev's monitor on the subsystems asked for, read
/// on a device thread of its own (poll on the monitor's socket and a wakeup), each event
/// handed to `events`. Events come from udevd when it runs (after its rules: links and
/// permissions are in place), else straight from the kernel (no links).
public final class HotplugMonitor: Sendable {
    public enum Source: String, Sendable { case udev, kernel }

    public let events: AsyncStream<HotplugEvent>
    public let source: Source
    private let thread: DeviceThread
    private let wakeup: WakeupEvent

    /// The subsystems a kit's devices are in.
    public static let kitSubsystems = ["video4linux", "sound", "input", "tty", "usb"]

    /// Whether this build follows devices at all (the Hotplug trait, libudev-dev).
    public static var isAvailable: Bool {
        #if Hotplug
        true
        #else
        false
        #endif
    }

    /// Starts listening. `source` nil: udevd's events when udevd runs (/run/udev/control),
    /// else the kernel's.
    public init(subsystems: [String] = kitSubsystems, source: Source? = nil) throws {
        let chosen = source ?? (access("/run/udev/control", F_OK) == 0 ? .udev : .kernel)
        self.source = chosen
        wakeup = try WakeupEvent()
        thread = DeviceThread(name: "fieldhal-hotplug")
        let (stream, continuation) = AsyncStream.makeStream(of: HotplugEvent.self, bufferingPolicy: .bufferingNewest(256))
        events = stream
        #if Hotplug
        guard let udev = udev_new() else {
            throw FieldHALError(.unavailable, subject: "hotplug", detail: "libudev could not start (udev_new)")
        }
        guard let monitor = udev_monitor_new_from_netlink(udev, chosen.rawValue) else {
            udev_unref(udev)
            throw FieldHALError(.unavailable, subject: "hotplug", detail: "cannot listen to \(chosen.rawValue) events: \(SystemError.describe())",
                                advice: "hotplug needs a netlink socket; in a container, devices are only seen at start-up")
        }
        for subsystem in subsystems { udev_monitor_filter_add_match_subsystem_devtype(monitor, subsystem, nil) }
        guard udev_monitor_enable_receiving(monitor) >= 0 else {
            udev_monitor_unref(monitor)
            udev_unref(udev)
            throw FieldHALError(.unavailable, subject: "hotplug", detail: "cannot receive \(chosen.rawValue) events: \(SystemError.describe())")
        }
        let handles = Handles(udev: udev, monitor: monitor)
        let wakeupDescriptor = wakeup.fileDescriptor
        thread.submit {
            defer {
                udev_monitor_unref(handles.monitor)
                udev_unref(handles.udev)
                continuation.finish()
            }
            let socket = udev_monitor_get_fd(handles.monitor)
            while true {
                var watched = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
                               pollfd(fd: wakeupDescriptor, events: Int16(POLLIN), revents: 0)]
                guard (try? SystemCall.poll(&watched, timeout: nil, subject: "udev's monitor")) != nil else { return }
                if watched[1].revents != 0 { return }  // stop()
                guard watched[0].revents & Int16(POLLIN) != 0, let device = udev_monitor_receive_device(handles.monitor) else { continue }
                continuation.yield(Self.event(device))
                udev_device_unref(device)
            }
        }
        #else
        continuation.finish()
        throw FieldHALError(.unsupported, subject: "hotplug", detail: "this build does not follow devices (the Hotplug trait is off)",
                            advice: "build with libudev-dev installed and the default traits")
        #endif
    }

    /// Stops listening; `events` ends.
    public func stop() {
        wakeup.signal()
        thread.stop()
    }

    #if Hotplug
    /// The C handles, handed to the thread that alone uses them.
    private struct Handles: @unchecked Sendable {
        let udev: OpaquePointer
        let monitor: OpaquePointer
    }

    private static func event(_ device: OpaquePointer) -> HotplugEvent {
        func text(_ pointer: UnsafePointer<CChar>?) -> String? { pointer.map { String(cString: $0) } }
        var links: [String] = []
        var entry = udev_device_get_devlinks_list_entry(device)
        while let current = entry {
            if let name = text(udev_list_entry_get_name(current)) { links.append(name) }
            entry = udev_list_entry_get_next(current)
        }
        var identity: [String: String] = [:]
        for key in ["ID_VENDOR_ID", "ID_MODEL_ID", "ID_SERIAL", "ID_PATH"] {
            if let value = text(udev_device_get_property_value(device, key)) { identity[key] = value }
        }
        return HotplugEvent(action: HotplugEvent.Action(rawValue: text(udev_device_get_action(device)) ?? "") ?? .other,
                            subsystem: text(udev_device_get_subsystem(device)) ?? "",
                            node: text(udev_device_get_devnode(device)), syspath: text(udev_device_get_syspath(device)) ?? "",
                            links: links.sorted(), identity: identity)
    }
    #endif
}
