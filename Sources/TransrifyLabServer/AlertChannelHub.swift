import Foundation
import Synchronization
import Transrify

/// The open alert channels (WebSockets), by tenant: a new duress alert is handed to every
/// channel of its tenant. The lab can close them all and refuse new ones, to play a
/// network that loses the channel and gets it back.
final class AlertChannelHub: Sendable {
    /// What goes down a channel: an alert, or (lab faults) any text at all.
    enum Outgoing: Sendable {
        case alert(Alert)
        case raw(String)
    }

    private struct Listener {
        var tenantKey: String
        /// The listening session's own user: their alerts are not sent to them.
        var excludedCustomerRef: String?
        var continuation: AsyncStream<Outgoing>.Continuation
    }

    private let listeners = Mutex<[UUID: Listener]>([:])
    private let accepting = Mutex(true)

    var isAccepting: Bool { accepting.withLock { $0 } }

    /// A stream of the tenant's new alerts, finished by `close` or `setAccepting(false)`.
    func subscribe(tenantKey: String, excludingCustomerRef excluded: String? = nil) -> (id: UUID, alerts: AsyncStream<Outgoing>) {
        let id = UUID()
        // A slow client keeps the newest 256 alerts; the snapshot on reconnect covers the rest.
        let (stream, continuation) = AsyncStream.makeStream(of: Outgoing.self, bufferingPolicy: .bufferingNewest(256))
        listeners.withLock { $0[id] = Listener(tenantKey: tenantKey, excludedCustomerRef: excluded, continuation: continuation) }
        return (id, stream)
    }

    func close(_ id: UUID) {
        listeners.withLock { $0.removeValue(forKey: id) }?.continuation.finish()
    }

    func publish(_ alert: Alert, tenantKey: String) {
        for listener in listeners.withLock({ Array($0.values) }) where listener.tenantKey == tenantKey && listener.excludedCustomerRef != alert.customerRef {
            listener.continuation.yield(.alert(alert))
        }
    }

    /// Every open channel gets `text` as it is (a hostile or broken server).
    func sendRaw(_ text: String) {
        for listener in listeners.withLock({ Array($0.values) }) { listener.continuation.yield(.raw(text)) }
    }

    var openCount: Int { listeners.withLock { $0.count } }

    /// Off: every open channel is closed by the server and new upgrades are refused (503).
    func setAccepting(_ on: Bool) {
        accepting.withLock { $0 = on }
        guard !on else { return }
        for listener in listeners.withLock({ listeners in defer { listeners.removeAll() }; return Array(listeners.values) }) {
            listener.continuation.finish()
        }
    }
}
