import Foundation
import TestSupport
import Testing
import Transrify

/// A server that sends its answer's head at once and its body a byte every 5 s (issue 41):
/// it once held `signin` past 200 s, and the daemon's connection to it stayed open after
/// the API client gave up.
@Suite(.serialized)
struct HostileServerTests {
    @Test func aTricklingBodyFailsAtTheDeadlineAndTheConnectionIsClosed() async throws {
        let peer = CLI.repositoryRoot.appendingPathComponent("Tests/TestSupport/Peers/trickle-server.py").path
        let server = try DaemonProcess([peer, "--interval", "5"], command: [], executable: "/usr/bin/python3")
        defer { Task { _ = await server.stop() } }
        guard let (line, _) = await server.waitForLine(containing: "listening", timeout: .seconds(10)),
              let port = Int(line.split(separator: " ").last ?? "") else {
            Issue.record("the trickling server did not start: \(server.output)")
            return
        }
        let url = URL(string: "http://127.0.0.1:\(port)/v1/sessions")!
        let started = ContinuousClock.now
        await #expect {
            _ = try await HTTPSession.send("GET", url, limit: 64 * 1024, deadline: .seconds(2))
        } throws: { error in
            guard case HTTPSession.Failure.transport(let reason) = error else { return false }
            return reason.contains("did not arrive whole within 2 s")
        }
        let took = ContinuousClock.now - started
        #expect(took < .seconds(30), "the exchange took \(took): not bounded by its deadline")
        // The server sees the client go: the kit does not keep what it gave up on.
        #expect(await server.waitForLine(containing: "closed after", timeout: .seconds(15)) != nil, "\(server.output)")
        // And an exchange with no deadline of its own gets one.
        #expect(HTTPSession.defaultDeadline(for: .empty) == .seconds(60))
        #expect(HTTPSession.defaultDeadline(for: .bytes(Data(count: 16 * 1024 * 100))) == .seconds(130))
    }
}
