import Foundation
import Testing
@testable import FieldHAL

/// What `fieldhal detect` writes and reads, apart from any device: the configuration text
/// (hostile names, candidates, alternatives) and the serial ports read from sysfs.
@Suite("Detection")
struct DetectionTests {
    @Test func theWrittenConfigurationParsesWhateverTheDevicesAreCalled() throws {
        let devices = [
            DetectedDevice(capability: .camera, plugin: "good", name: "evil\"]\n[kit]\nname = \"x", node: "/dev/video0",
                           details: ["bus": "usb-0000:00:14.0-1\\\"\n"], parameters: ["device": .string("/dev/v4l/by-id/a\"b\\c\n")]),
            DetectedDevice(capability: .camera, plugin: "good", name: "second", node: "/dev/video2", parameters: ["device": .string("/dev/video2")]),
            DetectedDevice(capability: .location, plugin: "broken", name: "u-blox 7", node: "/dev/ttyACM0", candidate: "gpsd does not read it yet"),
        ]
        let text = DetectedConfiguration.text(for: devices, header: "Written by a test\non two lines")
        let configuration = try TestPlugins.parse(text)
        #expect(configuration.devices[.camera]?.map(\.name) == ["video0", "video2"], "every camera found, each under a name")
        #expect(configuration.sections[.camera]?.plugin == "good")
        #expect(configuration.sections[.camera]?.parameters.string("device") == "/dev/v4l/by-id/a\"b\\c\n", "escaped and read back exactly")
        #expect(configuration.device(.camera, named: "video2")?.parameters.string("device") == "/dev/video2")
        #expect(configuration.sections[.location] == nil, "a candidate is written commented out")
        #expect(configuration.settings["kit"] == nil, "a device's name cannot add a section")
        #expect(text.contains("# A candidate only: gpsd does not read it yet\n"))
        #expect(text.contains("# 2 found: each under a name"))
        #expect(text.contains("# [haptics]: nothing found"))
        #expect(text.hasPrefix("# Written by a test\n# on two lines\n"))
    }

    @Test func oneDeviceFoundIsAPlainSectionAndNamesThatWouldCollideAreNumbered() throws {
        let one = DetectedConfiguration.text(for: [
            DetectedDevice(capability: .camera, plugin: "good", name: "vivid", node: "/dev/video0", parameters: ["device": .string("/dev/video0")]),
        ], header: "one")
        #expect(one.contains("\n[camera]\nplugin = \"good\"\n"))
        #expect(try TestPlugins.parse(one).sections[.camera]?.name == "default")
        let clashing = DetectedConfiguration.text(for: [
            DetectedDevice(capability: .camera, plugin: "good", name: "a", node: "/x/video0"),
            DetectedDevice(capability: .camera, plugin: "good", name: "b", node: "/y/video0"),
            DetectedDevice(capability: .camera, plugin: "good", name: "c", node: "/dev/_"),
        ], header: "clash")
        #expect(try TestPlugins.parse(clashing).devices[.camera]?.map(\.name) == ["video0", "device2", "device3"])
    }

    @Test func serialPortsAreReadFromSysfsWithTheirUSBIdentity() throws {
        let sysfs = NSTemporaryDirectory() + "fieldhal-sysfs-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: sysfs) }
        let files = FileManager.default
        func usbDevice(_ name: String, vendor: String, product: String, label: String) throws -> String {
            let device = "\(sysfs)/devices/usb1/\(name)"
            try files.createDirectory(atPath: device + "/\(name):1.0", withIntermediateDirectories: true)
            for (file, value) in [("idVendor", vendor), ("idProduct", product), ("product", label)] {
                try (value + "\n").write(toFile: "\(device)/\(file)", atomically: true, encoding: .utf8)
            }
            return device + "/\(name):1.0"
        }
        try files.createDirectory(atPath: sysfs + "/class/tty/ttyACM0", withIntermediateDirectories: true)
        try files.createDirectory(atPath: sysfs + "/class/tty/ttyUSB0", withIntermediateDirectories: true)
        try files.createDirectory(atPath: sysfs + "/class/tty/ttyS0", withIntermediateDirectories: true)
        try files.createSymbolicLink(atPath: sysfs + "/class/tty/ttyACM0/device",
                                     withDestinationPath: try usbDevice("1-1", vendor: "1546", product: "01a7", label: "u-blox 7 - GPS/GNSS Receiver"))
        try files.createSymbolicLink(atPath: sysfs + "/class/tty/ttyUSB0/device",
                                     withDestinationPath: try usbDevice("1-2", vendor: "10c4", product: "ea60", label: "CP2102 USB to UART Bridge Controller"))
        let ports = SerialPorts.all(sysfs: sysfs + "/class/tty")
        #expect(ports.map(\.node) == ["/dev/ttyACM0", "/dev/ttyUSB0"], "ttyS0 (no USB) is not a candidate")
        #expect(ports[0].looksLikeGNSS && ports[0].details == ["usb": "1546:01a7", "product": "u-blox 7 - GPS/GNSS Receiver"])
        #expect(!ports[1].looksLikeGNSS && ports[1].vendorId == "10c4", "a USB-serial bridge may hold a PN532 or a receiver")
    }
}
