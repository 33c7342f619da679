#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// udev's links to a device node that survive a replug: `/dev/v4l/by-id/usb-…-video-index0`
/// names the camera itself, `/dev/v4l/by-path/…` the port it is in. A configuration that
/// names the link rather than `/dev/video2` opens the same camera when the numbers move.
public enum StableDeviceName {
    /// The first link in `directories` (in order: by-id before by-path) that resolves to
    /// `node`, or nil when udev made none (no udev, or a virtual device).
    public static func link(to node: String, in directories: [String]) -> String? {
        let target = URL(fileURLWithPath: node).resolvingSymlinksInPath().path
        for directory in directories {
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
            for name in names {
                let link = directory + "/" + name
                if URL(fileURLWithPath: link).resolvingSymlinksInPath().path == target { return link }
            }
        }
        return nil
    }
}
