import FakePlugin
import FieldHAL
import FieldHALServer
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Both ways an event stream goes out — written straight to the connection from the
/// receiver's thread (`EventStreamSocket`), and through SwiftNIO's event loop when the
/// connection cannot be taken over — send the same bytes. (That a gone client's
/// descriptors are released: `APITests.followersComeAndGoAndTheStreamEndsProperly`, on a
/// daemon of its own, where no other test opens sockets meanwhile.)
@Suite(.serialized, .timeLimit(.minutes(1)))
struct EventStreamPathsTests {
    /// The API on a scratch socket, in this process, for a fake kit with a receiver.
    static func serve(directly: Bool) async throws -> (socket: String, server: Task<Void, any Error>) {
        let served = try await serve("[gps]\nplugin = \"fake\"\n", directly: directly)
        return (served.socket, served.server)
    }

    /// The API on a scratch socket, in this process, for the fake kit `configuration` names.
    static func serve(_ configuration: String, directly: Bool = true) async throws -> (socket: String, host: APIHost, server: Task<Void, any Error>) {
        let served = try await serveAPI(configuration, directly: directly)
        return (served.socket, served.api.host, served.server)
    }

    /// `serve`, with the server itself, for what it holds.
    static func serveAPI(_ configuration: String, directly: Bool = true) async throws -> (socket: String, api: APIServer, server: Task<Void, any Error>) {
        let registry = PluginRegistry([FakePlugin.descriptor])
        let parsed = try KitConfiguration.parse(configuration, file: "kit.toml", directory: "/tmp", registry: registry)
        let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")
        let host = await APIHost.start(identity: .init(version: "test", pid: getpid(), startedAt: Date(), configurationFile: "kit.toml"),
                                       authorisation: APIAuthorisation(configurationFile: "kit.toml"),
                                       load: { only in await Kit.load(parsed, registry: registry, context: context, devices: only) })
        let directory = NSTemporaryDirectory() + "fieldhal-api-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var server = APIServer(socketPath: directory + "/api.sock", host: host, scratchBase: directory + "/scratch")
        server.writesEventsDirectly = directly
        let (listening, ready) = AsyncStream.makeStream(of: Void.self)
        let running = Task { [server] in try await server.run { ready.yield() } }
        for await _ in listening { break }
        return (directory + "/api.sock", server, running)
    }

    /// The raw bytes of `GET /v1/events?types=fix` until `fixes` fixes have come (a blocking
    /// client, off the pool), the connection then closed by the client.
    static func follow(_ socketPath: String, fixes: Int, lastEventID: String? = nil) async throws -> String {
        try await offPool {
            let descriptor = try UnixSocketClient.connect(socketPath)
            defer { close(descriptor) }
            let resume = lastEventID.map { "Last-Event-ID: \($0)\r\n" } ?? ""
            let request = Array("GET /v1/events?types=fix HTTP/1.1\r\nHost: fieldhal\r\n\(resume)\r\n".utf8)
            _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            return UnixSocketClient.read(descriptor, within: .seconds(15)) { $0.components(separatedBy: "event: fix").count > fixes }
        }
    }

    @Test(arguments: [true, false])
    func fixesGoOutTheSameEitherWay(directly: Bool) async throws {
        let (socketPath, server) = try await Self.serve(directly: directly)
        defer { server.cancel() }
        let text = try await Self.follow(socketPath, fixes: 2)
        // The head, then chunks: the opening comment, then one chunk per fix.
        let parts = text.components(separatedBy: "\r\n\r\n")
        #expect(parts.first?.hasPrefix("HTTP/1.1 200") == true && parts.first?.lowercased().contains("transfer-encoding: chunked") == true, "\(text)")
        let body = parts.dropFirst().joined(separator: "\r\n\r\n")
        #expect(body.hasPrefix("a\r\n: events\n\n\r\n"), "\(body)")
        let fixes = body.components(separatedBy: "\nevent: fix\ndata: ").dropFirst()
        #expect(fixes.count >= 2, "\(body)")
        for fix in fixes {
            #expect(fix.contains("\"mode\":") && fix.contains("\"time\":\"") && fix.contains("}\n\n\r\n"), "each fix one chunk: \(fix)")
        }
        // Each event numbered in its stream's session: `id: <session>.<n>`, 1, 2, … in order.
        let ids = body.components(separatedBy: "\r\nid: ").dropFirst().map { $0.prefix { $0 != "\n" } }
        let numbers = ids.compactMap { $0.split(separator: ".").last.flatMap { UInt64($0) } }
        #expect(numbers.count >= 2 && numbers == Array(1...UInt64(numbers.count)), "\(ids)")
        #expect(Set(ids.map { $0.split(separator: ".").first ?? "" }).count == 1, "one session: \(ids)")
    }

    /// A client that comes back with `Last-Event-ID` goes on where it was: no number twice,
    /// none skipped, the fixes that came while it was away first. One whose stream the daemon
    /// no longer has is told so (`gap`) and starts afresh.
    @Test(arguments: [true, false])
    func aStreamResumesFromItsLastEventID(directly: Bool) async throws {
        let (socketPath, server) = try await Self.serve(directly: directly)
        defer { server.cancel() }
        func ids(_ text: String) -> [(session: Substring, number: UInt64)] {
            text.components(separatedBy: "id: ").dropFirst().compactMap { line in
                let id = line.prefix { $0 != "\n" }.split(separator: ".")
                return id.count == 2 ? UInt64(id[1]).map { (id[0], $0) } : nil
            }
        }
        let first = ids(try await Self.follow(socketPath, fixes: 2))
        let last = try #require(first.last)
        let resumed = try await Self.follow(socketPath, fixes: 2, lastEventID: "\(last.session).\(last.number)")
        let again = ids(resumed)
        #expect(!resumed.contains("event: gap"), "\(resumed)")
        #expect(again.first?.session == last.session && again.first?.number == last.number + 1, "\(first) then \(again)")
        #expect(again.map(\.number) == Array((last.number + 1)...(last.number + UInt64(again.count))), "\(again)")

        let stranger = try await Self.follow(socketPath, fixes: 1, lastEventID: "0123456789abcdef0123456789abcdef.7")
        let opening = stranger.components(separatedBy: "event: ").dropFirst().first ?? ""
        #expect(opening.hasPrefix("gap\ndata: ") && opening.contains("no longer has this stream"), "\(stranger)")
        #expect(ids(stranger).first?.number == 1 && ids(stranger).first?.session != last.session)
    }
}

