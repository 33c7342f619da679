#if V4L2
import CV4L2
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The machine's V4L2 capture nodes for `fieldhal detect`: each one's card, driver, bus and
/// own pixel formats (VIDIOC_QUERYCAP, VIDIOC_ENUM_FMT), named by udev's stable link when
/// there is one. Opening a node to ask does not claim it: only streaming does.
enum V4L2Detection {
    static func devices() -> [DetectedDevice] {
        V4L2Camera.captureDevices().compactMap { path in
            guard let handle = try? V4L2Handle(path: path) else { return nil }
            defer { handle.close() }
            var capability = v4l2_capability()
            guard (try? handle.control(FIELDHAL_VIDIOC_QUERYCAP, &capability, doing: "query capabilities")) != nil else { return nil }
            let card = text(&capability.card), driver = text(&capability.driver), bus = text(&capability.bus_info)
            let formats = V4L2Camera.pixelFormats(handle).map(\.description)
            let stable = StableDeviceName.link(to: path, in: ["/dev/v4l/by-id", "/dev/v4l/by-path"])
            return DetectedDevice(capability: .camera, plugin: "v4l2", name: card, node: path, stableName: stable,
                                  details: ["driver": driver, "bus": bus, "formats": formats.joined(separator: " ")],
                                  parameters: ["device": .string(stable ?? path)])
        }
    }

    /// A fixed-size C string field of a V4L2 structure.
    private static func text<T>(_ field: inout T) -> String {
        withUnsafeBytes(of: &field) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
    }
}
#endif
