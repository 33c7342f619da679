import FieldHALAPI
@testable import FieldHALServer
import Foundation
import Testing

/// A session's backlog, gaps and expiry, without a server.
struct EventSessionTests {
    static let caller = Caller.peer(PeerCredentials(pid: 1, uid: 4242, gid: 4242, groups: []))

    final class Received: @unchecked Sendable {
        let lock = NSLock()
        var texts: [String] = []
        var ended = false
        func outlet(_ connection: Int) -> EventSession.Outlet {
            .init(connection: connection, send: { text in self.lock.withLock { self.texts.append(text) } },
                  end: { self.lock.withLock { self.ended = true } })
        }
    }

    @Test func aClientAwayTooLongIsToldHowManyEventsItMissed() {
        let sessions = EventSessions(grace: .seconds(60), backlogLimit: 4)
        let session = sessions.open(caller: Self.caller, query: "fix|")
        let first = Received()
        _ = session.attach(first.outlet(1), after: 0, lastEventID: nil)
        session.emit("event: fix\ndata: {}\n\n")
        #expect(first.texts == ["id: \(session.id).1\nevent: fix\ndata: {}\n\n"])
        session.detach(1)
        for _ in 0..<10 { session.emit("event: fix\ndata: {}\n\n") }  // 2…11; 8…11 kept

        let lastSeen = "\(session.id).1"
        guard case .resume(let found, let after) = sessions.resumption(of: lastSeen, caller: Self.caller, query: "fix|") else {
            Issue.record("not resumed")
            return
        }
        let second = Received()
        _ = found.attach(second.outlet(2), after: after, lastEventID: lastSeen)
        #expect(second.texts.first?.hasPrefix("event: gap\ndata: ") == true && second.texts.first?.contains("\"missed\":6") == true, "\(second.texts)")
        #expect(second.texts.dropFirst().map { String($0.prefix(while: { $0 != "\n" })) } == (8...11).map { "id: \(session.id).\($0)" })

        // Another caller, or another query, never gets this stream.
        let other = Caller.peer(PeerCredentials(pid: 2, uid: 4343, gid: 4343, groups: []))
        guard case .fresh(let gap?) = sessions.resumption(of: lastSeen, caller: other, query: "fix|") else {
            Issue.record("resumed for another caller")
            return
        }
        #expect(gap.contains("not an event id of this stream's"))
        guard case .fresh(.some) = sessions.resumption(of: lastSeen, caller: Self.caller, query: "tag|") else {
            Issue.record("resumed for another query")
            return
        }
    }

    @Test func aSessionLeftPastTheGraceIsClosedAndAResumeIsToldSo() {
        let sessions = EventSessions(grace: .seconds(60), backlogLimit: 16)
        let session = sessions.open(caller: Self.caller, query: "fix|")
        let received = Received()
        _ = session.attach(received.outlet(1), after: 0, lastEventID: nil)
        session.emit("event: fix\ndata: {}\n\n")
        session.detach(1)
        sessions.expire(now: .now + .seconds(61))
        #expect(session.isClosed)
        guard case .fresh(let gap?) = sessions.resumption(of: "\(session.id).1", caller: Self.caller, query: "fix|") else {
            Issue.record("a closed session resumed")
            return
        }
        #expect(gap.contains("away longer than 60 s"), "\(gap)")
    }

    @Test func aSessionThatEndedCleanlyResumesFreshWithoutAGap() {
        let sessions = EventSessions()
        let session = sessions.open(caller: Self.caller, query: "fix|")
        let received = Received()
        _ = session.attach(received.outlet(1), after: 0, lastEventID: nil)
        session.emit("event: fix\ndata: {}\n\n")
        sessions.close(session, clean: true)
        #expect(received.ended)
        guard case .fresh(nil) = sessions.resumption(of: "\(session.id).1", caller: Self.caller, query: "fix|") else {
            Issue.record("a clean end said as a gap")
            return
        }
    }

    @Test func waitingSessionsPastTheLimitAreClosedOldestFirst() {
        let sessions = EventSessions(grace: .seconds(60), backlogLimit: 4, detachedLimit: 2)
        let opened = (0..<4).map { index -> EventSession in
            let session = sessions.open(caller: Self.caller, query: "fix|")
            _ = session.attach(Received().outlet(index), after: 0, lastEventID: nil)
            session.detach(index)
            return session
        }
        sessions.expire()
        #expect(opened.map(\.isClosed) == [true, true, false, false])
    }
}
