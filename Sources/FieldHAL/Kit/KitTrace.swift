#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A kit's devices as they behaved, recorded to be played back: what `fieldhal record`
/// writes and the `replay` plugin plays, so that a fault seen in the field comes back on a
/// laptop or in CI (gpsd's gpsfake does this for one receiver; this is per device, for a kit).
///
/// One JSON object per line: a header, then entries in the order they happened, each with
/// its time from the start of the recording (monotonic seconds), the device
/// (`gps.default`, `nfc.bench1`) and what it did — a fix, a tag found or lost, a change of
/// its state, a use through the API and its answer (`DeviceUse`: a pattern played, a
/// verification's outcome, a still by its size). Only what devices produced for the kit's
/// clients: never a PIN, a key, a session, the lock's and the alerts' events or the kit's
/// own work with its devices, so a duress session's trace is a normal one's.
public enum KitTrace {
    /// The format's version, in the header.
    public static let format = 1

    public struct Header: Sendable, Equatable, Codable {
        public var trace: Int
        /// When the recording started (wall clock), for the person reading it.
        public var recordedAt: Date
        /// What was recorded: the daemon's configuration file.
        public var source: String

        public init(recordedAt: Date, source: String) {
            self.trace = KitTrace.format
            self.recordedAt = recordedAt
            self.source = source
        }
    }

    public struct Entry: Sendable, Equatable, Codable {
        /// Seconds from the start of the recording.
        public var t: Double
        /// `CAPABILITY.NAME`: `gps.default`, `nfc.bench1`.
        public var device: String
        public var fix: Fix?
        /// A tag that came into the reader's field (`found`) or left it (`lost`).
        public var tag: NFCTag?
        public var tagState: String?
        /// The device's state changed (it went away, came back, its plugin failed).
        public var state: CapabilityStatus?
        /// The device was used through the API, and answered so (`t` is when it answered).
        public var use: DeviceUse?

        public init(t: Double, device: String, fix: Fix? = nil, tag: NFCTag? = nil, tagState: String? = nil, state: CapabilityStatus? = nil,
                    use: DeviceUse? = nil) {
            self.t = t
            self.device = device
            self.fix = fix
            self.tag = tag
            self.tagState = tagState
            self.state = state
            self.use = use
        }
    }

    /// One line (no newline) for a header or an entry. Times keep every bit (a fix replayed
    /// is the same fix).
    public static func line(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// The largest trace read: a day of fixes at 10 Hz with NFC and sensor lines beside them
    /// is a few hundred MiB; past this, a path named by mistake (a disk image) is refused.
    public static let maximumSize = 1 << 30

    /// A trace file read whole: its header and entries, or what is wrong with it (the line).
    public static func read(_ path: String) throws(FieldHALError) -> (Header, [Entry]) {
        let advice = "record one with `fieldhal record --output \(path)`"
        let bytes: [UInt8]?
        do {
            bytes = try RegularFile.read(path, limit: maximumSize, what: "trace")
        } catch {
            throw FieldHALError(.deviceNotFound, subject: "trace \(path)", detail: "cannot be read: \(error.detail)", advice: advice)
        }
        guard let bytes else {
            throw FieldHALError(.deviceNotFound, subject: "trace \(path)", detail: "cannot be read: no such file", advice: advice)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw FieldHALError(.deviceNotFound, subject: "trace \(path)", detail: "cannot be read: it is not UTF-8 text", advice: advice)
        }
        let decoder = JSONDecoder()
        var header: Header?
        var entries: [Entry] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: true).enumerated() {
            let data = Data(line.utf8)
            do {
                if header == nil {
                    let read = try decoder.decode(Header.self, from: data)
                    guard read.trace == format else {
                        throw FieldHALError(.unsupported, subject: "trace \(path)", detail: "is of format \(read.trace); this FieldHAL reads \(format)")
                    }
                    header = read
                } else {
                    entries.append(try decoder.decode(Entry.self, from: data))
                }
            } catch let error as FieldHALError {
                throw error
            } catch {
                throw FieldHALError(.malformedData, subject: "trace \(path)", detail: "line \(index + 1) is not a trace's \(header == nil ? "header" : "entry")",
                                    advice: "a trace is what `fieldhal record` writes, one JSON object per line")
            }
        }
        guard let header else {
            throw FieldHALError(.malformedData, subject: "trace \(path)", detail: "is empty", advice: "record one with `fieldhal record`")
        }
        return (header, entries)
    }
}
