import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A delaying TCP proxy on loopback (Peers/latency-proxy.py) in front of a server of the
/// tests, so that a kit meets the latency and jitter of a real link (50–300 ms each way by
/// default) instead of a zero-latency loopback: the duress bug of the last release passed
/// every test because none had any.
public final class LatencyProxy: @unchecked Sendable {
    public let port: Int
    private let process: Process

    public static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Peers/latency-proxy.py").path

    /// Starts the proxy off the cooperative pool, in front of `127.0.0.1:targetPort`.
    public static func start(targetPort: Int, upMilliseconds: String = "50-300", downMilliseconds: String = "50-300") async throws -> LatencyProxy {
        try await offPool { try LatencyProxy(targetPort: targetPort, up: upMilliseconds, down: downMilliseconds) }
    }

    init(targetPort: Int, up: String, down: String) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [Self.script, "--target", "127.0.0.1:\(targetPort)", "--up-ms", up, "--down-ms", down]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let lines = LineReader(output.fileHandleForReading)
        guard let line = lines.next(), let port = line.split(separator: ":").last.flatMap({ Int($0) }) else {
            throw GPSFakeError("latency-proxy.py did not say where it listens")
        }
        self.port = port
    }

    deinit { stop() }

    /// `http://127.0.0.1:<port>`, for a kit's `development_url`.
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
