import CMemfd
import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A recording in segments on the channel (protocol 1.5; docs/plugin-protocol.md,
/// "Recording in segments"). The host asks `camera.record` or `microphone.record` with
/// `"into": "segments"` and `"segmentMs"`, passing no descriptor. The plugin keeps one
/// stream from its device and, as each segment closes, sends it as a `$/progress` of the
/// request: the segment's place and what it holds, the file in a sealed memfd the plugin
/// made beside it. `camera.finish` / `microphone.finish` ask it to end at the next boundary;
/// the answer names how many segments were sent.
extension PluginProtocol {
    /// Since 1.5: a recording cut into segments by the plugin, each sent as it closes.
    public static let segmentedRecording = Version(major: 1, minor: 5)

    /// The largest segment a plugin may pass (a minute of 4K Motion-JPEG is well under).
    public static let largestSegment = 1 << 30

    /// The notification that ends the capability's segmented recording at its next boundary.
    public static func finishMethod(_ capability: Capability) -> String {
        capability == .camera ? "camera.finish" : "microphone.finish"
    }

    /// A recording request asked in segments: no descriptor goes with it.
    public static func segmented(_ parameters: JSONValue, length: Duration) -> JSONValue {
        var fields = parameters.object ?? [:]
        fields["into"] = .string("segments")
        fields["segmentMs"] = .integer(Int64(length.milliseconds))
        fields["fds"] = nil
        fields["file"] = nil
        return .object(fields)
    }

    /// The segment length a request asks for, or nil when it asks for one file.
    public static func segmentLength(in parameters: JSONValue, subject: String) throws(FieldHALError) -> Duration? {
        guard parameters["into"]?.string == "segments" else { return nil }
        guard let milliseconds = parameters["segmentMs"]?.integer, (100...600_000).contains(milliseconds) else {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "segmentMs must be an integer from 100 to 600000",
                                advice: "docs/plugin-protocol.md, \"Recording in segments\"")
        }
        return .milliseconds(milliseconds)
    }

    /// A closed segment as the plugin sends it: the `$/progress` value, and the file sealed
    /// in a descriptor of its own (the segment's memory stays the plugin's until sent).
    public static func progress<Recording>(of segment: RecordedSegment<Recording>, recording: JSONValue) throws(FieldHALError) -> (JSONValue, OwnedDescriptor) {
        let copy = dup(segment.file.descriptor)
        guard copy >= 0 else {
            throw FieldHALError(.io, subject: "segment \(segment.sequence)", detail: "dup: \(SystemError.describe())")
        }
        let owned = OwnedDescriptor(copy)
        guard fieldhal_memfd_seal(copy) == 0 else {
            throw FieldHALError(.io, subject: "segment \(segment.sequence)", detail: "sealing its memfd: \(SystemError.describe())",
                                advice: "record segments into memfds made with MFD_ALLOW_SEALING (MemoryFile)")
        }
        return (.object(["segment": .object([
            "sequence": .integer(Int64(segment.sequence)), "startedAt": .string(timeText(segment.startedAt)),
            "seconds": .number(segment.seconds), "recording": recording])]), owned)
    }

    /// A segment the plugin sent: its place, and its sealed memfd as the file (checked to be
    /// sealed and of a size allowed). `recording` reads its details, given the file's path.
    public static func segment<Recording>(from value: JSONValue, _ descriptors: [OwnedDescriptor], plugin: String,
                                          _ recording: (JSONValue, String) throws(FieldHALError) -> Recording) throws(FieldHALError) -> RecordedSegment<Recording> {
        guard let segment = value["segment"], let sequence = segment["sequence"]?.integer, sequence >= 0,
              let startedAt = segment["startedAt"]?.string.flatMap(date), let seconds = segment["seconds"].flatMap(number), seconds >= 0,
              let details = segment["recording"] else {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "sent a segment without sequence, startedAt, seconds or recording",
                                advice: "a fault in the plugin: docs/plugin-protocol.md, \"Recording in segments\"")
        }
        guard descriptors.count == 1 else {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "sent segment \(sequence) with \(descriptors.count) descriptors; it takes its memfd (\"fds\": 1)")
        }
        let subject = "plugin \(plugin)"
        guard fieldhal_memfd_is_sealed(descriptors[0].descriptor) == 1 else {
            throw FieldHALError(.protocolError, subject: subject, detail: "sent segment \(sequence) in a descriptor that is not a sealed memfd",
                                advice: "docs/plugin-protocol.md, \"Descriptors\": seal it with F_SEAL_WRITE, F_SEAL_SHRINK and F_SEAL_GROW")
        }
        var status = stat()
        guard fstat(descriptors[0].descriptor, &status) == 0, Int(status.st_size) <= largestSegment else {
            throw FieldHALError(.protocolError, subject: subject, detail: "sent segment \(sequence) of \(status.st_size) bytes; at most \(largestSegment) are allowed")
        }
        let file = MemoryFile(adopting: descriptors[0].take())
        return RecordedSegment(sequence: Int(sequence), startedAt: startedAt, seconds: seconds, file: file,
                               recording: try recording(details, RecordingDestination.memory(file).name))
    }

    private static func number(_ value: JSONValue) -> Double? {
        switch value {
        case .integer(let whole): Double(whole)
        case .number(let real): real
        default: nil
        }
    }
}
