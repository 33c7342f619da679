import FieldHAL
import FieldHALAPI
import FieldHALClient
import Foundation
import TestSupport
import Testing

/// The web door (issue 45): the daemon's API over HTTP on loopback, for pages, each request
/// carrying a token bound to the page's origin. Run in process on the fake kit; the requests
/// are a browser's, written by hand (the browser itself drives the example kiosk elsewhere).
@Suite("The web door", .serialized)
struct WebDoorTests {
    static func start() async throws -> (kit: DaemonServiceTests.Running, port: Int) {
        let port = try LoopbackHTTP.freePort()
        let kit = try String(contentsOfFile: CLI.exampleConfig, encoding: .utf8) + "\n[web]\nlisten = \"127.0.0.1:\(port)\"\n"
        let running = try await DaemonServiceTests.Running.start(configuration: kit)
        // The door listens once the services run: its first answer is the event.
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline, try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status") == nil {
            try await Task.sleep(for: .milliseconds(20))
        }
        return (running, port)
    }

    static let kiosk = "https://kiosk.example"

    @Test func aPageReachesTheKitOnlyWithItsTokenFromItsOrigin() async throws {
        let (kit, port) = try await Self.start()
        defer { Task { try? await kit.stop() } }
        let issued = try await kit.client.issueWebToken(APIWebTokenRequest(origin: "HTTPS://Kiosk.Example:443/", allow: ["status", "location", "haptics"]))
        let token = try #require(issued.token)
        #expect(issued.origin == Self.kiosk, "the origin as a browser sends it")
        #expect(token.hasPrefix("fhw_\(issued.id)_") && token.count == 4 + 8 + 1 + 64)

        // The book keeps the digest, never the text, and only the daemon's user reads it.
        let bookPath = kit.state + "/web-tokens.json"
        let book = try String(contentsOfFile: bookPath, encoding: .utf8)
        #expect(!book.contains(String(token.suffix(64))) && book.contains(issued.id))
        #expect((try FileManager.default.attributesOfItem(atPath: bookPath)[.posixPermissions] as? Int) == 0o600)
        #expect(try await kit.client.webTokens().map(\.token) == [nil], "the text is shown once")

        let bearer = ["Authorization": "Bearer \(token)", "Origin": Self.kiosk]
        let status = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status", headers: bearer))
        #expect(status.status == 200, "\(status)")
        #expect(status.headers["access-control-allow-origin"] == Self.kiosk && status.headers["vary"] == "Origin")
        let caller = try FieldHALAPI.decoder.decode(APIStatus.self, from: Data(status.body.utf8)).caller
        #expect(caller.token == issued.id && caller.origin == Self.kiosk && caller.uid == nil)
        #expect(caller.scopes == [.haptics, .location, .status])

        // A POST from the page; a scope the token lacks is the socket's 403, with advice.
        let played = try #require(try await LoopbackHTTP.exchange(port: port, "POST", "/v1/haptics/play",
                                                                 headers: bearer.merging(["Content-Type": "application/json"]) { $1 },
                                                                 body: #"{"pattern":"success"}"#))
        #expect(played.status == 200 && played.body.contains("\"steps\""), "\(played)")
        let refused = try #require(try await LoopbackHTTP.exchange(port: port, "POST", "/v1/nfc/read", headers: bearer))
        let problem = try FieldHALAPI.decoder.decode(APIErrorBody.self, from: Data(refused.body.utf8)).error
        #expect(refused.status == 403 && problem.kind == "forbidden" && problem.detail.contains("may not use nfc.read"), "\(refused)")
        #expect(problem.advice?.contains("fieldhal web token add --origin https://kiosk.example --allow haptics,location,nfc.read,status") == true)
        #expect(refused.headers["access-control-allow-origin"] == Self.kiosk, "a page can read why it was refused")

        // The token in the query where a page cannot set a header; the route never sees it.
        let located = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/location?access_token=\(token)&timeout_ms=5000",
                                                                   headers: ["Origin": Self.kiosk]))
        #expect(located.status == 200 && located.body.contains("\"fix\""), "\(located)")
        let twice = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status?access_token=\(token)", headers: bearer))
        #expect(twice.status == 400, "two tokens: which counts would be a guess")

        // Another origin, no token, a token never issued: refused, and said why.
        let elsewhere = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status",
                                                                     headers: ["Authorization": "Bearer \(token)", "Origin": "https://evil.example"]))
        #expect(elsewhere.status == 403 && elsewhere.body.contains("is for https://kiosk.example, not https://evil.example"), "\(elsewhere)")
        #expect(elsewhere.headers["access-control-allow-origin"] == nil, "the browser keeps the answer from the other origin's page")
        let none = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status", headers: ["Origin": Self.kiosk]))
        #expect(none.status == 401 && none.headers["www-authenticate"] == "Bearer" && none.body.contains("no web token"), "\(none)")
        let forged = String(token.dropLast()) + (token.last == "0" ? "1" : "0")
        let wrong = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status",
                                                                 headers: ["Authorization": "Bearer \(forged)", "Origin": Self.kiosk]))
        #expect(wrong.status == 401, "\(wrong)")

        // Without an Origin (an <img>, a tool) a token may read, never act.
        let noOrigin = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status", headers: ["Authorization": "Bearer \(token)"]))
        #expect(noOrigin.status == 200 && noOrigin.headers["access-control-allow-origin"] == nil)
        let acting = try #require(try await LoopbackHTTP.exchange(port: port, "POST", "/v1/haptics/play",
                                                                  headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"],
                                                                  body: #"{"pattern":"success"}"#))
        #expect(acting.status == 403 && acting.body.contains("without an Origin may only read"), "\(acting)")

        // A name that resolves here is not this door (DNS rebinding).
        let rebound = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status",
                                                                   headers: bearer.merging(["Host": "evil.example:\(port)"]) { $1 }))
        #expect(rebound.status == 403 && rebound.body.contains("is not this web door"), "\(rebound)")
        let local = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status", headers: bearer.merging(["Host": "localhost:\(port)"]) { $1 }))
        #expect(local.status == 200)

        // A token never manages tokens, even one for every scope.
        let managing = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/web/tokens", headers: bearer))
        #expect(managing.status == 403 && managing.body.contains("never through the web door"), "\(managing)")

        // Revoked: refused from the next request on, and the page's open stream ends.
        let following = try LoopbackHTTP.Following(port: port, "/v1/events?types=fix&access_token=\(token)", headers: ["Origin": Self.kiosk])
        #expect(try await following.read(until: "event: fix"), "\(following.received)")
        let revoked = try await kit.client.revokeWebToken(id: issued.id)
        #expect(revoked.id == issued.id && revoked.token == nil)
        let after = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status", headers: bearer))
        #expect(after.status == 401 && after.body.contains("revoked"), "\(after)")
        #expect(try await following.read(until: "\r\n0\r\n\r\n"), "the stream ends with its last chunk: \(following.received.suffix(200))")
        await #expect(throws: APIProblem.self) { try await kit.client.revokeWebToken(id: issued.id) }
    }

    /// A browser asks before a page's request that is not "simple" (a POST with JSON, an
    /// Authorization header): the answer allows exactly the origins tokens are bound to, with
    /// Chrome's private-network answer when it asks.
    @Test func preflightsAreAnsweredForTheTokensOriginsOnly() async throws {
        let (kit, port) = try await Self.start()
        defer { Task { try? await kit.stop() } }
        _ = try await kit.client.issueWebToken(APIWebTokenRequest(origin: "http://localhost:8000", allow: ["haptics"], devices: ["haptics.default"]))
        let asked = ["Origin": "http://localhost:8000", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "authorization, content-type", "Access-Control-Request-Private-Network": "true"]
        let allowed = try #require(try await LoopbackHTTP.exchange(port: port, "OPTIONS", "/v1/haptics/play", headers: asked))
        #expect(allowed.status == 204, "\(allowed)")
        #expect(allowed.headers["access-control-allow-origin"] == "http://localhost:8000")
        #expect(allowed.headers["access-control-allow-methods"]?.contains("POST") == true)
        #expect(allowed.headers["access-control-allow-headers"]?.contains("authorization") == true)
        #expect(allowed.headers["access-control-allow-private-network"] == "true")

        let stranger = try #require(try await LoopbackHTTP.exchange(port: port, "OPTIONS", "/v1/haptics/play",
                                                                    headers: asked.merging(["Origin": "https://evil.example"]) { $1 }))
        #expect(stranger.status == 403 && stranger.headers["access-control-allow-origin"] == nil, "\(stranger)")
        #expect(stranger.headers["access-control-allow-private-network"] == nil)
    }

    /// What `fieldhal web token add` refuses, before anything is stored.
    @Test func badTokenRequestsAreRefusedWithTheReason() async throws {
        let (kit, _) = try await Self.start()
        defer { Task { try? await kit.stop() } }
        let cases: [(APIWebTokenRequest, String)] = [
            (APIWebTokenRequest(origin: "http://kiosk.example", allow: ["status"]), "plain http from another machine"),
            (APIWebTokenRequest(origin: "https://kiosk.example/page", allow: ["status"]), "more than an origin"),
            (APIWebTokenRequest(origin: "kiosk", allow: ["status"]), "not an origin"),
            (APIWebTokenRequest(origin: "https://kiosk.example", allow: ["statuss"]), "no scope \"statuss\""),
            (APIWebTokenRequest(origin: "https://kiosk.example", allow: []), "names no scope"),
            (APIWebTokenRequest(origin: "https://kiosk.example", allow: ["camera"], devices: ["front"]), "is not a device"),
        ]
        for (request, reason) in cases {
            do {
                _ = try await kit.client.issueWebToken(request)
                Issue.record("issued for \(request)")
            } catch let problem as APIProblem {
                #expect(problem.detail.contains(reason) && problem.kind == "invalidArgument" && problem.status == 400, "\(request): \(problem)")
            }
        }
        #expect(try await kit.client.webTokens().isEmpty)
    }

    @Test func originsAreTakenAsBrowsersSendThem() {
        let cases: [(String, String?)] = [
            ("https://kiosk.example", "https://kiosk.example"), ("HTTPS://KIOSK.example:443", "https://kiosk.example"),
            ("https://kiosk.example:8443", "https://kiosk.example:8443"), ("http://localhost:8000", "http://localhost:8000"),
            ("http://127.0.0.1", "http://127.0.0.1"), ("http://[::1]:3000", "http://[::1]:3000"), ("http://app.localhost", "http://app.localhost"),
            ("http://kiosk.example", nil), ("ftp://kiosk.example", nil), ("https://kiosk.example/x", nil), ("https://u@kiosk.example", nil),
            ("null", nil), ("", nil),
        ]
        for (text, expected) in cases {
            let result = try? WebOrigin.normalised(text).get()
            #expect(result == expected, "\(text)")
        }
    }
}
