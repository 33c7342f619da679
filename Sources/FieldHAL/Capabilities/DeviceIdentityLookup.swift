#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Where a backend finds what its device is, from what udev and the kernel already publish:
/// plain files and links, read with no library (the core imports no C module).
extension DeviceIdentity {
    /// The first link in `directories` (udev's `/dev/v4l/by-id`, `/dev/serial/by-path`, …)
    /// that leads to the same node as `path`, or nil: the name a replug or a reboot keeps.
    /// `path` itself when it is such a link already.
    public static func stableLink(for path: String, in directories: [String]) -> String? {
        if directories.contains(where: { path.hasPrefix($0 + "/") }) { return path }
        let target = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        for directory in directories {
            guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
            for entry in entries.sorted() {
                let link = directory + "/" + entry
                if URL(fileURLWithPath: link).resolvingSymlinksInPath().path == target { return link }
            }
        }
        return nil
    }

    /// The USB device above a sysfs device directory (`/sys/class/video4linux/video0/device`),
    /// as its descriptor says: manufacturer (or the vendor id), product (or the product id),
    /// serial. Nil when it is not on USB (a platform device such as vivid, a PCI card).
    public static func usb(above sysfsDevice: String) -> DeviceIdentity? {
        var directory = URL(fileURLWithPath: sysfsDevice).resolvingSymlinksInPath()
        while directory.path.hasPrefix("/sys/devices/") {
            func read(_ name: String) -> String? {
                guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path), data.count < 4096 else { return nil }
                return String(decoding: data, as: UTF8.self)
            }
            if let vendorID = read("idVendor"), let productID = read("idProduct") {
                let ids = "\(vendorID.trimmingSpace()):\(productID.trimmingSpace())"
                return DeviceIdentity(vendor: read("manufacturer") ?? vendorID, model: read("product").map { "\($0.trimmingSpace()) (\(ids))" } ?? ids,
                                      serial: read("serial"))
            }
            directory.deleteLastPathComponent()
        }
        return nil
    }

    /// This identity with the gaps filled from `other` (what the device said first, what
    /// its bus says after).
    public func filled(from other: DeviceIdentity?) -> DeviceIdentity {
        guard let other else { return self }
        return DeviceIdentity(vendor: vendor ?? other.vendor, model: model ?? other.model, serial: serial ?? other.serial,
                              link: link ?? other.link)
    }
}
