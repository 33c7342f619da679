@testable import FieldHALServer
import FieldHAL
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The API's socket accepted by the daemon itself (`UnixSocketListener`): each connection
/// handed to SwiftNIO, a duplicate kept for the event stream, and nothing kept once the
/// connection is gone.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct UnixSocketListenerTests {
    /// Sends `request` on `descriptor` and reads until `marker` has come (or 10 s).
    static func exchange(_ descriptor: Int32, _ request: String, until marker: String) async throws -> String {
        try await offPool {
            let bytes = Array(request.utf8)
            _ = bytes.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            return UnixSocketClient.read(descriptor, within: .seconds(10)) { $0.contains(marker) }
        }
    }

    /// A keep-alive connection holds one duplicate; an event stream takes it (and writes
    /// through it); the client gone, nothing is held.
    @Test(arguments: [true, false])
    func theStreamTakesTheListenersDuplicate(directly: Bool) async throws {
        let (socketPath, api, server) = try await EventStreamPathsTests.serveAPI("[gps]\nplugin = \"fake\"\n", directly: directly)
        defer { server.cancel() }
        let client = try UnixSocketClient.connect(socketPath)
        let status = try await Self.exchange(client, "GET /v1/status HTTP/1.1\r\nHost: fieldhal\r\n\r\n", until: "}")
        #expect(status.hasPrefix("HTTP/1.1 200"), "\(status)")
        #expect(status.lowercased().contains("\r\ndate: "), "every response has its Date: \(status)")
        #expect(api.adopted.count == 1, "one connection, one duplicate")
        let stream = try await Self.exchange(client, "GET /v1/events?types=fix HTTP/1.1\r\nHost: fieldhal\r\n\r\n", until: "event: fix")
        #expect(stream.contains("event: fix"), "\(stream)")
        // Taken by the stream when it writes directly; still the listener's otherwise.
        #expect(api.adopted.count == (directly ? 0 : 1))
        close(client)
        #expect(await eventually { api.adopted.count == 0 }, "a gone client's duplicate is closed")
    }

    /// Connections that come and go (some closed before a byte, some after a request)
    /// leave no duplicate behind, and the socket answers after them.
    @Test func connectionsThatComeAndGoLeaveNothing() async throws {
        let (socketPath, api, server) = try await EventStreamPathsTests.serveAPI("[gps]\nplugin = \"fake\"\n")
        defer { server.cancel() }
        for round in 0..<40 {
            let client = try UnixSocketClient.connect(socketPath)
            if round.isMultiple(of: 2) {
                let answer = try await Self.exchange(client, "GET /v1/status HTTP/1.1\r\nHost: fieldhal\r\n\r\n", until: "}")
                #expect(answer.hasPrefix("HTTP/1.1 200"))
            }
            close(client)
        }
        #expect(await eventually { api.adopted.count == 0 }, "\(api.adopted.count) duplicates left")
        let client = try UnixSocketClient.connect(socketPath)
        defer { close(client) }
        let answer = try await Self.exchange(client, "GET /v1/status HTTP/1.1\r\nHost: fieldhal\r\n\r\n", until: "}")
        #expect(answer.hasPrefix("HTTP/1.1 200"))
    }

    /// Stopped, the server removes its socket, and nobody can connect.
    @Test func stoppedTheSocketIsGone() async throws {
        let (socketPath, _, server) = try await EventStreamPathsTests.serveAPI("[gps]\nplugin = \"fake\"\n")
        server.cancel()
        _ = await server.result
        #expect(!FileManager.default.fileExists(atPath: socketPath))
        #expect(throws: FieldHALError.self) { _ = try UnixSocketClient.connect(socketPath) }
    }

    @Test func theDateIsRFC9110s() {
        #expect(HTTPDate.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(1_796_527_823) == "Sun, 06 Dec 2026 03:30:23 GMT")
    }
}
