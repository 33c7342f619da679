import FieldHAL
import Foundation
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// The daemon's control socket: other `fieldhal` commands ask the running daemon to do
/// what needs the devices it holds (the NFC chip that emulates the duress tag, the kit it
/// keeps open) instead of opening them a second time. One JSON request line, one JSON
/// answer line, then the connection closes.
///
/// The socket is `[daemon] socket`, else `fieldhal.sock` in the state directory; mode 0660,
/// group `[daemon] socket_group` (default `fieldhal`) when that group exists.
enum ControlSocket {
    struct Request: Codable, Sendable {
        enum Command: String, Codable, Sendable {
            /// What the daemon is doing (nothing about the session's mode).
            case status
            /// Run the work after a sign-in in the daemon (see `BackgroundWork`).
            case afterSignIn = "after-signin"
            /// Run the work after an unlock of the kit's lock in the daemon.
            case afterUnlock = "after-unlock"
            /// Read a duress tag with the kit's NFC reader and acknowledge its alert (method NFC).
            case ackNFC = "ack-nfc"
        }
        var command: Command
        var alertId: String?
        var timeoutMilliseconds: Int?
    }

    struct Response: Codable, Sendable {
        var error: String?
        /// The exit status the asking command should use on error.
        var exitCode: Int32?
        var status: DaemonStatus?
        var alertId: String?
    }

    struct DaemonStatus: Codable, Sendable {
        var version: String
        var pid: Int32
        var startedAt: Date
        var alerts: String
        var signedIn: Bool
        var queuedEvidence: Int
    }

    static let maxLineBytes = 64 * 1024

    static func path(_ environment: Environment) -> String {
        environment.configuration.settings["daemon"]?.string("socket") ?? environment.stateDirectory.path + "/fieldhal.sock"
    }

    // MARK: Serving

    /// Serves until cancelled; `handle` answers each request. The socket file is removed on return.
    static func serve(at path: String, group groupName: String, handle: @escaping @Sendable (Request) async -> Response) async throws {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true) { channel in
                channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
            }
        defer { unlink(path) }
        // The group may talk to the daemon, nobody else (the socket is created under the umask, 0077 under systemd).
        chmod(path, 0o660)
        if let group = getgrnam(groupName) { _ = chown(path, uid_t.max, group.pointee.gr_gid) }
        try await withThrowingDiscardingTaskGroup { tasks in
            try await withTaskCancellationHandler {
                try await server.executeThenClose { connections in
                    for try await connection in connections {
                        tasks.addTask { try? await answer(connection, handle) }
                    }
                }
            } onCancel: {
                server.channel.close(promise: nil)
            }
        }
    }

    private static func answer(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>,
                               _ handle: @Sendable (Request) async -> Response) async throws {
        try await connection.executeThenClose { inbound, outbound in
            let response: Response
            if let line = try await readLine(inbound, within: .seconds(5)), let request = try? JSONDecoder().decode(Request.self, from: line) {
                response = await handle(request)
            } else {
                response = Response(error: "not a fieldhal control request", exitCode: 64)
            }
            try await outbound.write(ByteBuffer(bytes: try encoder.encode(response) + [0x0A]))
        }
    }

    // MARK: Asking

    /// Asks the daemon; nil when none listens at `path` (then the command does the work itself).
    static func ask(_ request: Request, at path: String) async throws -> Response? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            // The runtime directory is 0750: outside group fieldhal, the socket cannot even be seen.
            if errno == EACCES { throw permissionDenied(path) }
            return nil
        }
        let connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>
        do {
            connection = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(unixDomainSocketPath: path) { channel in
                    channel.eventLoop.makeCompletedFuture { try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel) }
                }
        } catch let error as IOError where error.errnoCode == ECONNREFUSED || error.errnoCode == ENOENT {
            return nil  // a socket file left by a daemon that died
        } catch let error as IOError where error.errnoCode == EACCES {
            throw permissionDenied(path)
        }
        return try await connection.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(bytes: try encoder.encode(request) + [0x0A]))
            guard let line = try await readLine(inbound) else {
                throw FieldHALError(.io, subject: "daemon socket \(path)", detail: "the daemon closed the connection without an answer")
            }
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            do { return try decoder.decode(Response.self, from: line) } catch {
                throw FieldHALError(.malformedData, subject: "daemon socket \(path)", detail: "an answer that is not JSON")
            }
        }
    }

    private static func permissionDenied(_ path: String) -> FieldHALError {
        FieldHALError(.permissionDenied, subject: "daemon socket \(path)", detail: "permission denied",
                      advice: "add this user to group fieldhal (sudo usermod -aG fieldhal $USER, then log in again)")
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }

    /// A request line within `limit`: a client that connects and says nothing is let go.
    private static func readLine(_ inbound: NIOAsyncChannelInboundStream<ByteBuffer>, within limit: Duration) async throws -> Data? {
        try await withThrowingTaskGroup(of: Data?.self) { group in
            group.addTask { try await readLine(inbound) }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }

    /// Bytes up to the first newline (or the end), at most `maxLineBytes`.
    private static func readLine(_ inbound: NIOAsyncChannelInboundStream<ByteBuffer>) async throws -> Data? {
        var collected = Data()
        for try await buffer in inbound {
            collected.append(contentsOf: buffer.readableBytesView)
            if let newline = collected.firstIndex(of: 0x0A) { return collected[collected.startIndex..<newline] }
            if collected.count > maxLineBytes { return nil }
        }
        return collected.isEmpty ? nil : collected
    }
}

/// `[daemon]`: where the daemon listens for other commands.
enum DaemonSettings {
    static let specs: [ParameterSpec] = [
        ParameterSpec("socket", .string, help: "the control socket (default fieldhal.sock in the state directory; /run/fieldhal/fieldhal.sock under the shipped unit)"),
        ParameterSpec("socket_group", .string, help: "the group that may use the control socket (default fieldhal)"),
    ]
}
