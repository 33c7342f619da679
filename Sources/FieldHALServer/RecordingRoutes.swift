import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation
import Hummingbird
import NIOCore
import NIOPosix
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `POST /v1/microphone/record`, `POST /v1/camera/record`: a recording on the device the
/// daemon holds, answered with the file itself. The daemon records into a private scratch
/// file, opens it, removes its name, and streams it: nothing is left behind, whether the
/// client reads it all, hangs up, or the daemon stops. One recording through the API per
/// device at a time: a second at once is refused `busy`, as the contract says.
extension APIServer {
    /// The longest recording (an hour), as the camera's own limit: the file is streamed, so
    /// its size costs the daemon no memory.
    static let longestRecording = 3_600_000

    func addRecordingRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.post("microphone/record") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.microphone, caller, doing: "POST /v1/microphone/record")
            let body = try await APIRequestBody.decode(APIAudioRecord.self, request, fields: ["durationMs", "sampleRate", "channels"])
            let recording = RecordingRequest(duration: try Self.recordingLength(body.durationMs),
                                             sampleRate: try Self.within(body.sampleRate ?? 44_100, "sampleRate", 8_000...192_000),
                                             channels: try Self.within(body.channels ?? 1, "channels", 1...8))
            let name = try host.device(.microphone, try Self.query(request, taking: ["device"]), scope: .microphone, caller,
                                       doing: "POST /v1/microphone/record")
            let microphone = try host.microphone(named: name)
            let device = try host.device(.microphone, named: name)
            let file = try Self.scratchFile(scratchBase, "wav")
            do {
                let report = try await host.use(.microphoneRecord, on: name) {
                    var report = try await host.recordingAlone(on: device) {
                        try await Self.whileConnected(context.channel) { try await microphone.record(recording, to: file) }
                    }
                    report.path = ""
                    return report
                } answer: { $0.audio = $1 }
                return try Self.streaming(file, contentType: "audio/wav", report: report)
            } catch {
                unlink(file)
                throw error
            }
        }
        v1.post("camera/record") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.camera, caller, doing: "POST /v1/camera/record")
            let body = try await APIRequestBody.decode(APIVideoRecord.self, request, fields: ["durationMs", "width", "height", "fps", "quality"])
            let video = VideoRequest(duration: try Self.recordingLength(body.durationMs),
                                     width: try Self.within(body.width ?? 640, "width", 16...4096),
                                     height: try Self.within(body.height ?? 480, "height", 16...4096),
                                     framesPerSecond: try Self.within(body.fps ?? 30, "fps", 1...120),
                                     quality: try Self.within(body.quality ?? 80, "quality", 1...100))
            let name = try host.device(.camera, try Self.query(request, taking: ["device"]), scope: .camera, caller, doing: "POST /v1/camera/record")
            let camera = try host.camera(named: name)
            let device = try host.device(.camera, named: name)
            let file = try Self.scratchFile(scratchBase, "avi")
            do {
                let report = try await host.use(.cameraRecord, on: name) {
                    var report = try await host.recordingAlone(on: device) {
                        try await Self.whileConnected(context.channel) { try await camera.recordVideo(video, to: file) }
                    }
                    report.path = ""
                    return report
                } answer: { $0.video = $1 }
                return try Self.streaming(file, contentType: "video/x-msvideo", report: report)
            } catch {
                unlink(file)
                throw error
            }
        }
    }

    static func recordingLength(_ milliseconds: Int) throws -> Duration {
        .milliseconds(try within(milliseconds, "durationMs", 1...longestRecording))
    }

    static func within(_ value: Int, _ name: String, _ range: ClosedRange<Int>) throws -> Int {
        guard range.contains(value) else {
            throw FieldHALError(.invalidArgument, subject: name, detail: "\(value) is not from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// What daemons killed mid-recording left behind in the scratch base: removed when the
    /// next one starts (the folders of daemons still running are theirs), relative to a
    /// descriptor and never through a symlink (`PrivateScratch`).
    static func clearScratch(_ base: String) {
        PrivateScratch.removeStale(in: base) { name in
            guard let pid = Int32(name) else { return false }
            return kill(pid, 0) != 0 && errno == ESRCH
        }
    }

    /// A fresh name in this daemon's scratch folder: `<base>/<pid>/<uuid>.<suffix>`, both
    /// folders checked to be this user's and private.
    static func scratchFile(_ base: String, _ suffix: String) throws -> String {
        try PrivateScratch.prepare(base)
        let directory = base + "/\(getpid())"
        try PrivateScratch.prepare(directory)
        return directory + "/" + UUID().uuidString + "." + suffix
    }

    /// The file as the answer's body, read in chunks on NIO's thread pool; its name is gone
    /// before the first byte goes out.
    static func streaming(_ path: String, contentType: String, report: some Encodable) throws -> Response {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        unlink(path)
        guard fd >= 0 else { throw SystemError.io("open", subject: "recording") }
        let header = String(decoding: try FieldHALAPI.encoder.encode(report), as: UTF8.self)
        let file = FileDescriptor(fd)
        let body = ResponseBody { writer in
            defer { file.close() }
            while true {
                let chunk = try await NIOThreadPool.singleton.runIfActive { try file.read(upTo: 128 * 1024) }
                if chunk.isEmpty { break }
                try await writer.write(ByteBuffer(bytes: chunk))
            }
            try await writer.finish(nil)
        }
        var headers: HTTPFields = [.contentType: contentType, .cacheControl: "no-store"]
        headers[.init(FieldHALAPI.recordingHeader)!] = header
        return Response(status: .ok, headers: headers, body: body)
    }
}

/// An open file, closed once.
private final class FileDescriptor: Sendable {
    private let fd: Int32
    private let closed = Atomic<Bool>(false)

    init(_ fd: Int32) { self.fd = fd }

    func read(upTo count: Int) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        let got = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, count) }
        guard got >= 0 else { throw SystemError.io("read", subject: "recording") }
        return Array(buffer.prefix(got))
    }

    func close() {
        if !closed.exchange(true, ordering: .acquiringAndReleasing) { Glibc.close(fd) }
    }

    deinit { close() }
}
