import FieldHAL
import FieldHALAPI
import Foundation
import Synchronization

/// One follower's stream of events, numbered (`id: <session>.<n>`), outliving its connection
/// for `grace`: a client that reconnects with `Last-Event-ID` gets what came meanwhile, from a
/// bounded backlog, and is told of what it cannot have (`event: gap`).
///
/// The session, not the connection, follows the sources: while its client is away it keeps
/// following (a receiver stays on for those seconds), so that what happened is there to be
/// replayed. Numbers count only this session's events, so they say nothing of other
/// callers' streams or of events this caller may not see; the session's name is random.
final class EventSession: Sendable {
    let id: String
    let caller: Caller
    /// What it follows (types and devices): a resume must ask for the same.
    let query: String

    /// Where the session's events go while a connection has it.
    struct Outlet: Sendable {
        let connection: Int
        let send: @Sendable (String) -> Void
        let end: @Sendable () -> Void
    }

    private struct State {
        var next: UInt64 = 1
        var backlog: [(number: UInt64, text: String)] = []
        var outlet: Outlet?
        var detachedAt: ContinuousClock.Instant?
        var closed = false
    }

    private let state = Mutex(State())
    private let backlogLimit: Int
    /// The task that follows the sources, cancelled when the session closes.
    let following = Mutex<Task<Void, Never>?>(nil)

    init(caller: Caller, query: String, backlogLimit: Int) {
        id = Self.randomName()
        self.caller = caller
        self.query = query
        self.backlogLimit = backlogLimit
    }

    /// Numbers `body` (an event with its blank line), keeps it, and sends it to the
    /// connection that has the session, if any.
    func emit(_ body: String) {
        state.withLock { state in
            guard !state.closed else { return }
            let text = "id: \(id).\(state.next)\n" + body
            state.backlog.append((state.next, text))
            if state.backlog.count > backlogLimit { state.backlog.removeFirst(state.backlog.count - backlogLimit) }
            state.next += 1
            state.outlet?.send(text)
        }
    }

    /// Gives the session to a connection: first what came after `number` (a gap said first
    /// when the backlog no longer reaches back to it), then each event as it comes. A
    /// connection that had it before is ended. False when the session has closed.
    func attach(_ outlet: Outlet, after number: UInt64, lastEventID: String?) -> Bool {
        let replaced: Outlet? = state.withLock { state in
            guard !state.closed else { return nil }
            let firstKept = state.backlog.first?.number ?? state.next
            if number + 1 < firstKept, let lastEventID {
                outlet.send(EventSessions.gap(after: lastEventID, missed: Int(firstKept - number - 1),
                                              reason: "more than \(backlogLimit) events came while the client was away; the oldest were not kept"))
            }
            for entry in state.backlog where entry.number > number { outlet.send(entry.text) }
            let previous = state.outlet
            state.outlet = outlet
            state.detachedAt = nil
            return previous
        }
        replaced?.end()
        return state.withLock { !$0.closed }
    }

    /// The connection `connection` is gone: the session waits for its client to come back.
    func detach(_ connection: Int) {
        state.withLock { state in
            guard state.outlet?.connection == connection else { return }
            state.outlet = nil
            state.detachedAt = .now
        }
    }

    /// When the session lost its connection (nil: it has one, or has closed).
    var detachedAt: ContinuousClock.Instant? { state.withLock { $0.closed ? nil : $0.detachedAt } }

    /// The last number given out.
    var lastNumber: UInt64 { state.withLock { $0.next - 1 } }

    var isClosed: Bool { state.withLock { $0.closed } }

    /// Ends the session: its connection's response ends, and the sources are let go.
    func close() {
        let outlet: Outlet? = state.withLock { state in
            guard !state.closed else { return nil }
            state.closed = true
            defer { state.outlet = nil; state.backlog = [] }
            return state.outlet
        }
        outlet?.end()
        following.withLock { $0?.cancel() }
    }

    private static func randomName() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in String(generator.next() as UInt64, radix: 16) }.map { String(repeating: "0", count: 16 - $0.count) + $0 }.joined()
    }
}

/// The event sessions of one daemon: found again by `Last-Event-ID`, closed when their
/// client stays away longer than `grace`, at most `detachedLimit` waiting at once (the
/// oldest closed first: a client that connects and leaves in a loop cannot pile them up).
final class EventSessions: Sendable {
    let grace: Duration
    let backlogLimit: Int
    let detachedLimit: Int
    private struct Ended {
        var caller: Caller
        var query: String
        var lastNumber: UInt64
        var clean: Bool
        var at: ContinuousClock.Instant
    }

    private let sessions = Mutex<[String: EventSession]>([:])
    /// Sessions that ended lately, so that a resume after a clean end (a reload, the
    /// daemon's sources closing) is told apart from one that lost events.
    private let ended = Mutex<[String: Ended]>([:])
    private let connections = Atomic<Int>(0)

    init(grace: Duration = .seconds(60), backlogLimit: Int = 512, detachedLimit: Int = 64) {
        self.grace = grace
        self.backlogLimit = backlogLimit
        self.detachedLimit = detachedLimit
    }

    func nextConnection() -> Int { connections.wrappingAdd(1, ordering: .relaxed).newValue }

    /// What a `Last-Event-ID` names: the session to resume and the number last seen, or why
    /// it cannot be resumed (said to the client as a gap, unless the session ended cleanly
    /// at that number).
    enum Resumption {
        case resume(EventSession, after: UInt64)
        case fresh(gap: String?)
    }

    func resumption(of lastEventID: String?, caller: Caller, query: String) -> Resumption {
        guard let lastEventID else { return .fresh(gap: nil) }
        expire()
        let parts = lastEventID.split(separator: ".")
        guard parts.count == 2, let number = UInt64(parts[1]) else {
            return .fresh(gap: Self.gap(after: lastEventID, missed: nil, reason: "not an event id of this daemon's"))
        }
        let name = String(parts[0])
        if let session = sessions.withLock({ $0[name] }), !session.isClosed {
            guard session.caller == caller, session.query == query, number <= session.lastNumber else {
                return .fresh(gap: Self.gap(after: lastEventID, missed: nil, reason: "not an event id of this stream's"))
            }
            return .resume(session, after: number)
        }
        if let gone = ended.withLock({ $0[name] }), gone.caller == caller, gone.query == query {
            if gone.clean && number == gone.lastNumber { return .fresh(gap: nil) }
            return .fresh(gap: Self.gap(after: lastEventID, missed: gone.lastNumber > number ? Int(gone.lastNumber - number) : nil,
                                        reason: gone.clean ? "the stream ended before its last events reached the client" : "the client was away longer than \(grace.secondsDescription)"))
        }
        return .fresh(gap: Self.gap(after: lastEventID, missed: nil,
                                    reason: "the daemon no longer has this stream (it restarted, or the client was away longer than \(grace.secondsDescription))"))
    }

    /// A new session, kept until it closes.
    func open(caller: Caller, query: String) -> EventSession {
        expire()
        let session = EventSession(caller: caller, query: query, backlogLimit: backlogLimit)
        sessions.withLock { $0[session.id] = session }
        return session
    }

    /// Closes `session` and remembers how it ended for a while.
    func close(_ session: EventSession, clean: Bool) {
        let last = session.lastNumber
        session.close()
        sessions.withLock { _ = $0.removeValue(forKey: session.id) }
        ended.withLock { $0[session.id] = Ended(caller: session.caller, query: session.query, lastNumber: last, clean: clean, at: .now) }
    }

    /// Closes the sessions whose client stayed away past the grace, and the oldest waiting
    /// ones past the limit; forgets ended sessions after the grace.
    func expire(now: ContinuousClock.Instant = .now) {
        let waiting = sessions.withLock { sessions in
            sessions.values.compactMap { session in session.detachedAt.map { (session, $0) } }.sorted { $0.1 < $1.1 }
        }
        let overLimit = max(0, waiting.count - detachedLimit)
        for (index, (session, since)) in waiting.enumerated() where index < overLimit || now - since > grace {
            close(session, clean: false)
        }
        ended.withLock { ended in ended = ended.filter { now - $0.value.at <= grace } }
    }

    /// The `gap` event: what a client that reconnected did not get.
    static func gap(after lastEventID: String, missed: Int?, reason: String) -> String {
        let gap = APIEventGap(lastEventId: lastEventID, missed: missed, reason: reason)
        let data = (try? FieldHALAPI.encoder.encode(gap)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        return "event: gap\ndata: \(data)\n\n"
    }
}
