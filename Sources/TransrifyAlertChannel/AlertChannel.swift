import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import Transrify
import WSClient

/// The client of the alerts WebSocket channel (Req 35): connects to the configured URL with
/// the tenant key as a query parameter and hands every message's alerts to the caller.
///
/// One `listen` is one connection: it returns when the server closes the channel and throws
/// when the connection cannot be made, is refused, drops, or carries garbage. Falling back
/// to polling and reconnecting is the caller's business (`AlertSubscription`).
public struct AlertChannel: Sendable {
    public var url: URL
    public var tenantKey: String
    /// The listening kit's session, sent so that the server can leave its user's own alerts
    /// out (the kit drops them too); redacted like the tenant key in every message.
    public var sessionId: String?
    /// A ping this often; a server that does not answer within the period is gone.
    public var pingInterval: Duration = .seconds(20)
    /// The connection and the upgrade within this, or the channel counts as failed (and the
    /// caller polls): a server that accepts and never answers must not hold the kit off
    /// both the channel and polling.
    public var openTimeout: Duration = .seconds(10)
    /// The largest message accepted: a hostile server cannot make the kit hoard.
    public static let maxMessageBytes = 1 << 20

    public init(url: URL, tenantKey: String, sessionId: String? = nil) {
        self.url = url
        self.tenantKey = tenantKey
        self.sessionId = sessionId
    }

    /// A `ws://` or `wss://` URL; anything else is a configuration error said plainly.
    public static func validated(_ text: String) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "ws" || scheme == "wss",
              let host = url.host, !host.isEmpty else {
            throw AlertChannelError.invalidURL(text)
        }
        return url
    }

    /// The URL with `tenantKey` (Req 35.2) and `sessionId` added to its query.
    var connectURL: String {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: false) ?? URLComponents()
        components.queryItems = (components.queryItems ?? []).filter { $0.name != "tenantKey" && $0.name != "sessionId" }
            + [URLQueryItem(name: "tenantKey", value: tenantKey)] + (sessionId.map { [URLQueryItem(name: "sessionId", value: $0)] } ?? [])
        // URLComponents leaves `+` alone in queries; a server would read it as a space.
        components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        return components.string ?? url.absoluteString
    }

    /// Connects and listens until the channel closes. `onOpen` runs once the upgrade is
    /// done, `onAlerts` for every message (a snapshot first, then each new alert), in order.
    /// Cancelling the task closes the channel and returns.
    public func listen(onOpen: @escaping @Sendable () async -> Void,
                       onAlerts: @escaping @Sendable (AlertChannelMessage) async -> Void) async throws {
        // NIO cannot cancel a connection that waits for its upgrade, but shutting its event
        // loop down closes it: each connection gets a loop of its own, shut down when the
        // connection ends, or when it has not opened within `openTimeout`, or on cancel.
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // NIO names its threads by a counter that grows with every loop made; the name
        // would differ from one sign-in to the next.
        try? await loop.next().submit { Self.nameThread("fieldhal-alerts") }.get()
        let opened = NIOLockedValueBox(false)
        let timedOut = NIOLockedValueBox(false)
        let stop = AsyncStream<Void>.makeStream()
        // The connection runs in a task of its own, out of reach of the caller's
        // cancellation, and is stopped by `stop` instead. Cancelled, swift-websocket closes
        // its channel from a detached task, which can run after the loop below is shut
        // down; SwiftNIO then prints an error to standard error — the daemon's journal, on
        // one sign-in and not on the next.
        let connection = Task {
            try await connect(on: loop, stop: stop.stream, onOpen: {
                opened.withLockedValue { $0 = true }
                await onOpen()
            }, onAlerts: onAlerts)
        }
        let closed: WebSocketCloseFrame?
        do {
            closed = try await withTaskCancellationHandler {
                try await withThrowingTaskGroup(of: WebSocketCloseFrame?.self) { group in
                    group.addTask { try await connection.value }
                    group.addTask {
                        // The watchdog: cut short by cancellation (the connection ended, or
                        // the caller stopped listening). Not opened by then, the loop goes down
                        // with the connection: an upgrade in progress ignores cancellation.
                        try? await Task.sleep(for: openTimeout)
                        if !opened.withLockedValue({ $0 }) {
                            if !Task.isCancelled { timedOut.withLockedValue { $0 = true } }
                            try? await loop.shutdownGracefully()
                        }
                        // Opened in time: stay out of the way until the connection ends.
                        while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
                        return nil
                    }
                    // The connection's result comes first: the watchdog ends only when cancelled.
                    let result = try await group.next() ?? nil
                    group.cancelAll()
                    return result
                }
            } onCancel: {
                stop.continuation.finish()
            }
        } catch {
            try? await loop.shutdownGracefully()
            if timedOut.withLockedValue({ $0 }) {
                throw AlertChannelError.connectionFailed(url.absoluteString, "no upgrade within \(openTimeout)")
            }
            if Task.isCancelled { return }
            throw error
        }
        try? await loop.shutdownGracefully()
        if let closed, !Task.isCancelled, closed.closeCode != .normalClosure, closed.closeCode != .goingAway {
            throw AlertChannelError.closed(url.absoluteString, "\(closed.closeCode)" + (closed.reason.map { " (\($0))" } ?? ""))
        }
    }

    /// One connection. It listens until the server closes the channel or `stop` ends; then
    /// the handler returns, and swift-websocket closes the channel in this task.
    private func connect(on loop: MultiThreadedEventLoopGroup, stop: AsyncStream<Void>, onOpen: @escaping @Sendable () async -> Void,
                         onAlerts: @escaping @Sendable (AlertChannelMessage) async -> Void) async throws -> WebSocketCloseFrame? {
        var logger = Logger(label: "fieldhal.alert-channel")
        logger.logLevel = .critical  // failures are thrown to the caller, which reports them once
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 16, autoPing: .enabled(timePeriod: pingInterval))
        do {
            return try await WebSocketClient.connect(url: connectURL, configuration: configuration, eventLoopGroup: loop,
                                                     logger: logger) { inbound, outbound, _ in
                await onOpen()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for try await message in inbound.messages(maxSize: Self.maxMessageBytes) {
                            guard case .text(let text) = message,
                                  let decoded = try? JSONDecoder().decode(AlertChannelMessage.self, from: Data(text.utf8)) else {
                                throw AlertChannelError.malformedMessage(String(describing: message).prefix(80).description)
                            }
                            await onAlerts(decoded)
                        }
                    }
                    group.addTask {
                        for await _ in stop {}
                        // Cancelled, the server's side ended first and swift-websocket says why.
                        // (A close frame written from a cancelled task is not sent, and the
                        // close handshake would then wait its whole timeout for the answer.)
                        if Task.isCancelled { return }
                        try? await outbound.close(.goingAway, reason: "kit stopped listening")
                    }
                    // Whichever ends first, the server's side or the caller's stop, ends both.
                    try await group.next()
                    group.cancelAll()
                }
            }
        } catch let error as AlertChannelError {
            throw error
        } catch let error as WebSocketClientError where error == .webSocketUpgradeFailed {
            throw AlertChannelError.refused(connectURL.redactingSecrets)
        } catch {
            throw AlertChannelError.connectionFailed(url.absoluteString, String(describing: error))
        }
    }

    private static func nameThread(_ name: String) {
        Thread.current.name = name  // the current thread's name in the system, as `ps -L` shows it
    }
}

/// What went wrong with the alerts channel, for the log and the fallback decision.
public enum AlertChannelError: Error, Equatable, CustomStringConvertible {
    case invalidURL(String)
    case refused(String)
    case connectionFailed(String, String)
    case closed(String, String)
    case malformedMessage(String)

    public var description: String {
        switch self {
        case .invalidURL(let text): "alerts WebSocket URL \"\(text)\" is not a ws:// or wss:// URL — fix alerts_websocket_url in [transrify]"
        case .refused(let url): "alerts WebSocket \(url): the server refused the upgrade (wrong path or tenant key, or the channel is off)"
        case .connectionFailed(let url, let reason): "alerts WebSocket \(url): cannot connect: \(reason)"
        case .closed(let url, let reason): "alerts WebSocket \(url): closed by the server: \(reason)"
        case .malformedMessage(let start): "alerts WebSocket: a message that is not an alert (\(start)…); reconnecting"
        }
    }
}

extension String {
    /// The tenant key and the session id are secrets: never in a log line.
    var redactingSecrets: String {
        var text = self
        for name in ["tenantKey=", "sessionId="] {
            guard let range = text.range(of: name) else { continue }
            let end = text[range.upperBound...].firstIndex(of: "&") ?? text.endIndex
            text = text.replacingCharacters(in: range.upperBound..<end, with: "…")
        }
        return text
    }
}
