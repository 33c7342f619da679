import FieldHAL
import FieldHALAPI
import FieldHALClient
import Foundation
import TestSupport
import Testing

/// Events name their device (issue 43): a bench with two receivers and two readers follows
/// both on one stream, each fix and tag saying where it came from; without `device` a stream
/// follows each capability's default device, as before names.
@Suite("Events from named devices")
struct NamedDeviceEventsTests {
    static let bench = """
        [gps.left]
        plugin = "fake"
        interval_ms = 50
        track = [{ lat = 52.5, lon = 13.4 }]

        [gps.right]
        plugin = "fake"
        interval_ms = 50
        track = [{ lat = 48.1, lon = 11.6 }]

        [nfc.front]
        plugin = "fake"
        tags = [{ type = "ntag213", uid = "04:01:02:03:04:05:06", text = "front" }]

        [nfc.back]
        plugin = "fake"
        tags = [{ type = "ntag213", uid = "04:0A:0B:0C:0D:0E:0F", text = "back" }]
        """

    /// The first `count` events of a stream, or what ended it.
    static func first(_ count: Int, of stream: AsyncThrowingStream<APIEvent, any Error>) async throws -> [APIEvent] {
        var events: [APIEvent] = []
        for try await event in stream {
            events.append(event)
            if events.count == count { break }
        }
        return events
    }

    @Test func fixesFromTwoReceiversEachNameTheirReceiver() async throws {
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.bench)
        let client = kit.client
        // Both receivers on one stream: fixes of both come, each with its name and position.
        var latitudes: [String: Set<Double>] = [:]
        for try await event in client.events([.fix], devices: ["left", "right"]) {
            guard case .fix(let fix, let device) = event else { continue }
            latitudes[device ?? "none", default: []].insert(fix.latitude ?? 0)
            if latitudes["left"] != nil, latitudes["right"] != nil { break }
        }
        #expect(latitudes == ["left": [52.5], "right": [48.1]], "\(latitudes)")

        // No name: the default receiver (the first in the file), named as such.
        let defaults = try await Self.first(3, of: client.events([.fix]))
        for event in defaults {
            guard case .fix(let fix, let device) = event else { Issue.record("\(event)"); continue }
            #expect(device == "left" && fix.latitude == 52.5, "\(event)")
        }
        // One receiver by name.
        let right = try await Self.first(2, of: client.events([.fix], devices: ["right"]))
        #expect(right.allSatisfy { if case .fix(_, "right") = $0 { true } else { false } }, "\(right)")

        // A client written from the contract alone: the Python example, with repeated `device`.
        let python = try await CLI.runTool("/usr/bin/env", ["python3", CLI.repositoryRoot.path + "/examples/python/fieldhal_api.py",
                                                            "--socket", kit.state + "/api.sock", "events", "--types", "fix",
                                                            "--device", "left", "--device", "right", "--count", "20"])
        let named = Set(python.stdout.split(separator: "\n").compactMap { line in
            ((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])
                .flatMap { $0["data"] as? [String: Any] }?["device"] as? String
        })
        #expect(python.status == 0 && named == ["left", "right"], "\(python)")
        try await kit.stop()
    }

    @Test func tagsOnTwoReadersEachNameTheirReader() async throws {
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.bench)
        let client = kit.client
        var found: [String: String] = [:]
        for try await event in client.events([.tag], devices: ["front", "back"]) {
            guard case .tag(let tag) = event, tag.state == .found else { continue }
            found[tag.device ?? "none"] = tag.tag.uid
            if found.count == 2 { break }
        }
        #expect(found == ["front": "04:01:02:03:04:05:06", "back": "04:0A:0B:0C:0D:0E:0F"], "\(found)")

        // Both kinds at once: each name picks the devices of the kind it names, and a kind
        // none of whose devices is named keeps its default.
        var kinds: Set<String> = []
        for try await event in client.events([.fix, .tag], devices: ["right", "back"]) {
            switch event {
            case .fix(_, let device): kinds.insert("fix \(device ?? "none")")
            case .tag(let tag): kinds.insert("tag \(tag.device ?? "none")")
            default: continue
            }
            if kinds.contains("fix right"), kinds.contains("tag back") { break }
        }
        #expect(kinds == ["fix right", "tag back"], "\(kinds)")
        try await kit.stop()
    }

    @Test func aNameNoFollowedDeviceHasIsA404ThatListsTheirs() async throws {
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.bench)
        let client = kit.client
        for (kinds, name, listed) in [([APIEvent.Kind.fix], "front", "left, right"), ([.tag], "middle", "front, back")] {
            do {
                _ = try await Self.first(1, of: client.events(kinds, devices: [name]))
                Issue.record("\(kinds) from \(name) was served")
            } catch let problem as APIProblem {
                #expect(problem.status == 404 && problem.kind == "noSuchDevice", "\(problem)")
                #expect(problem.advice?.contains(listed) == true, "\(problem)")
            }
        }
        // A name that cannot be one is the caller's mistake too (400), and so is a parameter
        // the route does not take.
        for query in ["types=fix&device=bad%20name", "types=fix&devcie=left"] {
            let socket = kit.state + "/api.sock"
            let status = try await offPool { () throws -> Int? in
                var status: Int?
                try DaemonConnection.exchange(socketPath: socket, request: Array("GET /v1/events?\(query) HTTP/1.1\r\nHost: fieldhal\r\n\r\n".utf8),
                                              subject: socket, deadline: .now + .seconds(30), stop: nil) { part in
                    if case .head(let code, _) = part { status = code }
                }
                return status
            }
            #expect(status == 400, "\(query)")
        }
        try await kit.stop()
    }
}
