import FieldHAL
import FieldHALAPI
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix

/// `[metrics]`: where Prometheus scrapes the kit. Prometheus reads HTTP over TCP, not a Unix
/// socket, so the metrics get a loopback port of their own, serving `/metrics` and nothing
/// else; a fleet's Prometheus reaches it through its usual agent or tunnel.
public struct MetricsSettings: Sendable, Equatable {
    public var address: String
    public var port: Int
    /// Whether the daemon's own memory, descriptors and threads are published. Off by
    /// default: a duress capture moves them (docs/fleet.md).
    public var includesProcess: Bool

    public static let specs: [ParameterSpec] = [
        ParameterSpec("listen", .string, required: true,
                      help: "the loopback address and port Prometheus scrapes /metrics at, e.g. \"127.0.0.1:9464\" (no [metrics] section: only GET /v1/metrics on the socket)"),
        ParameterSpec("process", .boolean,
                      help: "also publish the daemon's memory, descriptors and threads (default false: a duress capture moves them, see docs/fleet.md)"),
    ]

    /// The `[metrics]` section, or nil when there is none; anything but a loopback address
    /// and a port is a configuration error naming the key.
    public init?(settings: PluginParameters?, file: String) throws(ConfigError) {
        guard let settings else { return nil }
        let (address, port) = try LoopbackAddress.parse(settings.string("listen") ?? "", file: file, key: "metrics.listen",
                                                         serving: "the metrics are for this machine's agent (127.0.0.1 or ::1)")
        self.address = address
        self.port = port
        includesProcess = settings.boolean("process") ?? false
    }

    public init(address: String, port: Int, includesProcess: Bool = false) {
        self.address = address
        self.port = port
        self.includesProcess = includesProcess
    }
}

/// A loopback `address:port`, as `[web] listen` and `[metrics] listen` take it.
enum LoopbackAddress {
    static func parse(_ listen: String, file: String, key: String, serving: String) throws(ConfigError) -> (String, Int) {
        func refuse(_ message: String) -> ConfigError { ConfigError(file: file, key: key, message: message) }
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]), (1...65_535).contains(port) else {
            throw refuse("\"\(TerminalText.escaped(listen))\" is not an address and a port: write it as \"127.0.0.1:\(key == "web.listen" ? 8480 : 9464)\"")
        }
        var address = String(listen[..<colon])
        if address.hasPrefix("[") && address.hasSuffix("]") { address = String(address.dropFirst().dropLast()) }
        if address == "localhost" { address = "127.0.0.1" }
        guard WebOrigin.isLoopback(address) else {
            throw refuse("\(TerminalText.escaped(address)) is not a loopback address: \(serving)")
        }
        return (address, port)
    }
}

/// `/metrics` on `[metrics] listen`, for Prometheus: nothing else is served there, and no
/// caller is told apart (TCP has no credentials), so nothing private is on it.
public struct MetricsDoor: Sendable {
    public let settings: MetricsSettings
    public let host: APIHost
    /// Open connections at once; past it a new one is closed.
    public var connections = 16

    public init(settings: MetricsSettings, host: APIHost) {
        self.settings = settings
        self.host = host
    }

    /// Serves until cancelled; calls `onListening` once the port accepts connections.
    public func run(onListening: @escaping @Sendable () async -> Void = {}) async throws {
        var quiet = Logger(label: "fieldhal.metrics")
        quiet.logLevel = .critical
        let host = self.host, connections = self.connections, ledger = ConnectionLedger()
        let router = Router(context: APIRequestContext.self)
        router.get("metrics") { _, _ in host.metricsResponse() }
        let limits = CallerGateLimits()
        let app = Application(
            router: router,
            server: HTTPServerBuilder { responder in
                GatedHTTP1Channel(
                    inner: HTTP1Channel(responder: responder, configuration: .init(
                        additionalChannelHandlers: [RequestHeadGuard(deadline: limits.headDeadline)], idleTimeout: .seconds(10))),
                    limits: limits, ledger: ledger,
                    admit: { _, ledger in ledger.take(0, limit: connections) ? .admitted(countedAs: 0) : .dropped })
            },
            configuration: .init(address: .hostname(settings.address, port: settings.port), serverName: nil),
            onServerRunning: { _ in await onListening() },
            eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton.next()),
            logger: quiet)
        try await app.runService(gracefulShutdownSignals: [])
    }
}

extension APIHost {
    /// The exposition of `metrics`, as Prometheus's text format 0.0.4 names itself.
    func metricsResponse() -> Response {
        let bytes = metrics.exposition(devices: devices, version: identity.version)
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8", .cacheControl: "no-store"],
                        body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}
