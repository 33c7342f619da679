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
        // connection ends. Shut down under a connection in progress, swift-websocket can be
        // left waiting on a future that the dead loop never completes ("Cannot schedule tasks
        // on an EventLoop that has already shut down"); so that is the last resort, and no
        // wait after it is longer than `abandonAfter`.
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        // NIO names its threads by a counter that grows with every loop made; the name
        // would differ from one sign-in to the next.
        try? await loop.next().submit { Self.nameThread("fieldhal-alerts") }.get()
        let opened = NIOLockedValueBox(false)
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
        let isOpen = { opened.withLockedValue { $0 } }
        var wake = await Self.end(of: connection, within: openTimeout, orCancellation: { stop.continuation.finish() })
        while case .timeUp = wake, isOpen() {  // opened in time: listen until it ends or the caller stops
            wake = await Self.end(of: connection, within: nil, orCancellation: { stop.continuation.finish() })
        }
        var timedOut = false
        if case .cancelled = wake {
            // Told to stop: open, the channel closes with its close handshake; still in the
            // upgrade, it closes as soon as the upgrade is done. Either way, a moment.
            wake = await Self.end(of: connection, within: (isOpen() ? closeTimeout : upgradeGrace) + .seconds(1))
        } else if case .timeUp = wake {
            timedOut = true
        }
        if case .timeUp = wake {
            // A server that accepts and never answers (or never finishes closing).
            try? await loop.shutdownGracefully()
            wake = await Self.end(of: connection, within: Self.abandonAfter)
        }
        try? await loop.shutdownGracefully()
        if timedOut {
            throw AlertChannelError.connectionFailed(url.absoluteString, "no upgrade within \(openTimeout)")
        }
        guard case .ended(let result) = wake, !Task.isCancelled else { return }
        let closed = try result.get()
        if let closed, closed.closeCode != .normalClosure, closed.closeCode != .goingAway {
            throw AlertChannelError.closed(url.absoluteString, "\(closed.closeCode)" + (closed.reason.map { " (\($0))" } ?? ""))
        }
    }

    /// How long a connection told to stop during its upgrade is given to finish the
    /// upgrade, and so to close cleanly, before its loop is shut down under it.
    public var upgradeGrace: Duration = .seconds(2)
    /// The close handshake's limit: a server that does not answer a close holds the kit's
    /// next subscription off this long at most.
    public var closeTimeout: Duration = .seconds(5)
    /// After its loop is shut down, how long a connection is waited for before it is left
    /// behind, a suspended task holding a few kilobytes: the kit listens again either way.
    static let abandonAfter: Duration = .seconds(1)

    enum Wake: Sendable {
        case ended(Result<WebSocketCloseFrame?, any Error>)
        case timeUp
        case cancelled
    }

    /// The connection's end, or `limit` passed (nil: no limit), or — with `orCancellation` —
    /// the caller's task cancelled (`orCancellation` then runs at once). Waits even in a
    /// cancelled task: a continuation, not a task sleep, so a stop can be waited for.
    static func end(of connection: Task<WebSocketCloseFrame?, any Error>, within limit: Duration?,
                    orCancellation: (@Sendable () -> Void)? = nil) async -> Wake {
        let first = FirstWake()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                first.wait(continuation)
                let ending = Task { first.resume(.ended(await connection.result)) }
                let timer = limit.map { limit in Task { try? await Task.sleep(for: limit); first.resume(.timeUp) } }
                first.whenResumed { ending.cancel(); timer?.cancel() }
            }
        } onCancel: {
            guard let orCancellation else { return }
            orCancellation()
            first.resume(.cancelled)
        }
    }

    /// Resumes one waiter once, with whatever comes first (also before it waits).
    final class FirstWake: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Wake, Never>?
            var wake: Wake?
            var resumed = false
            var cleanUp: (@Sendable () -> Void)?
        }
        private let state = NIOLockedValueBox(State())

        func wait(_ continuation: CheckedContinuation<Wake, Never>) {
            let early = state.withLockedValue { state -> Wake? in
                if let wake = state.wake, !state.resumed { state.resumed = true; return wake }
                state.continuation = continuation
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }

        func whenResumed(_ cleanUp: @escaping @Sendable () -> Void) {
            let now = state.withLockedValue { state -> Bool in
                if state.resumed { return true }
                state.cleanUp = cleanUp
                return false
            }
            if now { cleanUp() }
        }

        func resume(_ wake: Wake) {
            let (continuation, cleanUp) = state.withLockedValue { state -> (CheckedContinuation<Wake, Never>?, (@Sendable () -> Void)?) in
                guard state.wake == nil else { return (nil, nil) }
                state.wake = wake
                guard let continuation = state.continuation else { return (nil, nil) }
                state.resumed = true
                state.continuation = nil
                defer { state.cleanUp = nil }
                return (continuation, state.cleanUp)
            }
            continuation?.resume(returning: wake)
            cleanUp?()
        }
    }

    /// One connection. It listens until the server closes the channel or `stop` ends; then
    /// the handler returns, and swift-websocket closes the channel in this task.
    private func connect(on loop: MultiThreadedEventLoopGroup, stop: AsyncStream<Void>, onOpen: @escaping @Sendable () async -> Void,
                         onAlerts: @escaping @Sendable (AlertChannelMessage) async -> Void) async throws -> WebSocketCloseFrame? {
        var logger = Logger(label: "fieldhal.alert-channel")
        logger.logLevel = .critical  // failures are thrown to the caller, which reports them once
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 16, closeTimeout: closeTimeout, autoPing: .enabled(timePeriod: pingInterval))
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
