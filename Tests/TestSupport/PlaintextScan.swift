import Foundation

/// Looks for recorded media in plaintext under a directory (issue 19: evidence must never
/// reach the disk unsealed): a WAV's header, an AVI's list and a JPEG's JFIF segment. In
/// sealed bytes each of these 5–8-byte markers turns up by chance about once in 2^40 tries
/// or fewer, so a hit is plaintext.
public enum PlaintextScan {
    public static let markers = [Array("WAVEfmt ".utf8), Array("AVI LIST".utf8), Array("JFIF\0".utf8)]

    /// The files under `directory` (relative paths) that hold a marker.
    public static func files(under directory: String) -> [String] {
        guard let names = FileManager.default.enumerator(atPath: directory)?.allObjects as? [String] else { return [] }
        return names.filter { name in
            guard let data = FileManager.default.contents(atPath: directory + "/" + name) else { return false }
            let bytes = [UInt8](data)
            return markers.contains { marker in
                bytes.count >= marker.count && (0...(bytes.count - marker.count)).contains { bytes[$0..<($0 + marker.count)].elementsEqual(marker) }
            }
        }
    }

    /// Scans `directory` every `interval` until cancelled; the task's value is every hit.
    public static func watch(_ directory: String, every interval: Duration) -> Task<[String], Never> {
        Task.detached {
            var found: [String] = []
            while !Task.isCancelled {
                found += files(under: directory)
                try? await Task.sleep(for: interval)
            }
            return found
        }
    }
}
