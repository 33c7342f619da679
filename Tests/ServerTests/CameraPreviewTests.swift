import FakePlugin
import FieldHAL
@testable import FieldHALServer
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The live preview (issue 45): Motion-JPEG parts of whole frames at the size asked, one
/// capture for every viewer of a camera, stopped when the last one leaves.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct CameraPreviewTests {
    static func serve() async throws -> (socket: String, host: APIHost, server: Task<Void, any Error>) {
        try await EventStreamPathsTests.serve("[camera]\nplugin = \"fake\"\n")
    }

    /// A viewer on the Unix socket: the answer's head, then whole parts as they come.
    final class Viewer: @unchecked Sendable {
        let descriptor: Int32
        var received: [UInt8] = []
        var head = ""

        init(_ socketPath: String, query: String) throws {
            descriptor = try UnixSocketClient.connect(socketPath)
            let request = Array("GET /v1/camera/preview?\(query) HTTP/1.1\r\nHost: fieldhal\r\n\r\n".utf8)
            _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }

        deinit { close(descriptor) }

        /// The JPEGs of the first `count` parts (the body de-chunked as it comes).
        func frames(_ count: Int) async throws -> [[UInt8]] {
            try await offPool { [self] in
                var buffer = [UInt8](repeating: 0, count: 65_536)
                let deadline = ContinuousClock.now + .seconds(20)
                while ContinuousClock.now < deadline {
                    let found = Self.parts(in: Self.dechunked(received))
                    if found.count >= count { return Array(found.prefix(count)) }
                    var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    guard poll(&entry, 1, 200) == 1 else { continue }
                    let read = recv(descriptor, &buffer, buffer.count, 0)
                    if read <= 0 { break }
                    received += buffer[0..<read]
                }
                return Self.parts(in: Self.dechunked(received))
            }
        }

        /// Reads until the answer's head is in.
        func readHead() async throws {
            try await offPool { [self] in
                var buffer = [UInt8](repeating: 0, count: 4096)
                let deadline = ContinuousClock.now + .seconds(20)
                while ContinuousClock.now < deadline, received.firstRange(of: [13, 10, 13, 10]) == nil {
                    var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    guard poll(&entry, 1, 200) == 1 else { continue }
                    let read = recv(descriptor, &buffer, buffer.count, 0)
                    if read <= 0 { break }
                    received += buffer[0..<read]
                }
            }
        }

        var headText: String {
            let text = String(decoding: received.prefix(2048), as: UTF8.self)
            return text.components(separatedBy: "\r\n\r\n").first ?? ""
        }

        static func dechunked(_ bytes: [UInt8]) -> [UInt8] {
            let separator: [UInt8] = [13, 10, 13, 10]
            guard let start = bytes.firstRange(of: separator)?.upperBound else { return [] }
            var out: [UInt8] = [], index = start
            while let lineEnd = bytes[index...].firstRange(of: [13, 10]), let size = Int(String(decoding: bytes[index..<lineEnd.lowerBound], as: UTF8.self), radix: 16),
                  size > 0, lineEnd.upperBound + size + 2 <= bytes.count {
                out += bytes[lineEnd.upperBound..<(lineEnd.upperBound + size)]
                index = lineEnd.upperBound + size + 2
            }
            return out
        }

        static func parts(in body: [UInt8]) -> [[UInt8]] {
            var frames: [[UInt8]] = [], index = 0
            while let headEnd = body[index...].firstRange(of: [13, 10, 13, 10]) {
                let head = String(decoding: body[index..<headEnd.lowerBound], as: UTF8.self)
                guard head.hasPrefix("--fieldhal-frame\r\n"), let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("Content-Length: ") }),
                      let length = Int(line.dropFirst("Content-Length: ".count)), headEnd.upperBound + length + 2 <= body.count else { break }
                frames.append(Array(body[headEnd.upperBound..<(headEnd.upperBound + length)]))
                index = headEnd.upperBound + length + 2
            }
            return frames
        }
    }

    @Test func tenViewersShareOneCaptureOfWholeFramesAndTheLastToLeaveStopsIt() async throws {
        let (socketPath, host, server) = try await Self.serve()
        defer { server.cancel() }
        let viewers = try (0..<10).map { _ in try Viewer(socketPath, query: "width=160&height=120&fps=10&quality=60") }
        for viewer in viewers {
            let frames = try await viewer.frames(2)
            #expect(frames.count == 2, "\(viewer.headText)")
            for frame in frames {
                #expect(frame.starts(with: [0xFF, 0xD8]) && frame.suffix(2).elementsEqual([0xFF, 0xD9]), "a whole JPEG")
                #expect(JPEGDimensions.of(frame).map { $0 == 160 && $1 == 120 } == true)
            }
        }
        #expect(viewers[0].headText.contains("multipart/x-mixed-replace; boundary=fieldhal-frame"), "\(viewers[0].headText)")
        #expect(viewers[0].headText.contains("FieldHAL-Preview: 160x120@10"), "\(viewers[0].headText)")
        #expect(host.previews.capturesStarted == 1, "one capture for ten viewers")

        // A later viewer asking for another size gets the running capture's, and says so.
        let late = try Viewer(socketPath, query: "width=320&height=240")
        let lateFrame = try await late.frames(1).first
        #expect(lateFrame.flatMap(JPEGDimensions.of).map { $0 == 160 && $1 == 120 } == true)
        #expect(late.headText.contains("FieldHAL-Preview: 160x120@10"))
        #expect(host.previews.capturesStarted == 1)
    }

    @Test func aBadRequestIsRefusedBeforeAnyFrame() async throws {
        let (socketPath, _, server) = try await Self.serve()
        defer { server.cancel() }
        let viewer = try Viewer(socketPath, query: "fps=60")
        try await viewer.readHead()
        #expect(viewer.headText.hasPrefix("HTTP/1.1 400"), "\(viewer.headText)")
    }
}

/// A baseline JPEG's size, from its SOF0 marker (enough for the fake camera's frames).
enum JPEGDimensions {
    static func of(_ bytes: [UInt8]) -> (Int, Int)? {
        var index = 2
        while index + 9 < bytes.count, bytes[index] == 0xFF {
            let marker = bytes[index + 1]
            let length = Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
            if (0xC0...0xC2).contains(marker) {
                return (Int(bytes[index + 7]) << 8 | Int(bytes[index + 8]), Int(bytes[index + 5]) << 8 | Int(bytes[index + 6]))
            }
            index += 2 + length
        }
        return nil
    }
}
