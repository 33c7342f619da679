#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// USB serial ports as sysfs describes them, for detection: where a PN532 board or a GNSS
/// receiver may be. Read from /sys only: nothing is written to any port.
public struct SerialPort: Sendable, Equatable {
    public var node: String
    /// udev's `/dev/serial/by-id` link, when there is one.
    public var stableName: String?
    /// USB vendor and product ids (lower-case hex) and the product string, when on USB.
    public var vendorId: String?
    public var productId: String?
    public var product: String?

    /// A GNSS receiver by its USB ids or product string (u-blox's vendor id; "GPS", "GNSS");
    /// a generic USB-serial bridge (CP210x, FTDI, CH340, PL2303) may hold either kind.
    public var looksLikeGNSS: Bool {
        if vendorId == "1546" { return true }
        let text = (product ?? "").uppercased() + " " + (stableName ?? "").uppercased()
        return text.contains("GPS") || text.contains("GNSS")
    }

    public var details: [String: String] {
        var details: [String: String] = [:]
        if let vendorId, let productId { details["usb"] = "\(vendorId):\(productId)" }
        if let product { details["product"] = product }
        return details
    }
}

public enum SerialPorts {
    /// ttyUSB* and ttyACM* ports, in name order.
    public static func all(sysfs: String = "/sys/class/tty") -> [SerialPort] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: sysfs)) ?? [])
            .filter { $0.hasPrefix("ttyUSB") || $0.hasPrefix("ttyACM") }.sorted()
        return names.map { name in
            let node = "/dev/" + name
            var port = SerialPort(node: node, stableName: StableDeviceName.link(to: node, in: ["/dev/serial/by-id"]))
            // The USB device is an ancestor of the tty's device directory: the first one up
            // that has idVendor.
            var directory = URL(fileURLWithPath: "\(sysfs)/\(name)/device").resolvingSymlinksInPath()
            for _ in 0..<6 {
                if let vendor = read(directory.appendingPathComponent("idVendor").path) {
                    port.vendorId = vendor
                    port.productId = read(directory.appendingPathComponent("idProduct").path)
                    port.product = read(directory.appendingPathComponent("product").path)
                    break
                }
                directory.deleteLastPathComponent()
            }
            return port
        }
    }

    private static func read(_ path: String) -> String? {
        (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingSpace()
    }
}
