import FieldHAL
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
@testable import FieldHALDaemon
import Foundation
import Logging
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `/metrics` (issue 46): what a fleet's Prometheus reads of a kit, on `[metrics] listen` and
/// as `GET /v1/metrics` on the socket; scraped by Debian's real Prometheus server.
@Suite("Metrics", .serialized, .timeLimit(.minutes(3)))
struct MetricsTests {
    static func kit(port: Int, process: Bool = false, web: Int? = nil) -> String {
        HealthTests.degradedKit + "\n[metrics]\nlisten = \"127.0.0.1:\(port)\"\n" + (process ? "process = true\n" : "")
            + (web.map { "[web]\nlisten = \"127.0.0.1:\($0)\"\n" } ?? "")
    }

    /// `GET path` on the daemon's socket, raw: status line and body.
    static func overSocket(_ kit: DaemonServiceTests.Running, _ path: String) async throws -> String {
        try await offPool {
            let descriptor = try UnixSocketClient.connect(kit.state + "/api.sock")
            defer { close(descriptor) }
            let request = Array("GET \(path) HTTP/1.1\r\nHost: fieldhal\r\nConnection: close\r\n\r\n".utf8)
            _ = request.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var text = "", buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                if count <= 0 { return text }
                text += String(decoding: buffer[0..<count], as: UTF8.self)
            }
        }
    }

    @Test func eachDeviceIsUpOrDownAndEachAnswerIsCounted() async throws {
        let port = try LoopbackHTTP.freePort(), web = try LoopbackHTTP.freePort()
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: port, web: web))
        defer { Task { try? await kit.stop() } }
        _ = try await kit.client.status()
        _ = try? await Self.overSocket(kit, "/v1/no-such-route")

        let scrape = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics"))
        #expect(scrape.status == 200 && scrape.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8", "\(scrape)")
        let text = scrape.body
        #expect(text.contains("fieldhal_device_up{capability=\"gps\",device=\"default\"} 1"), "\(text)")
        #expect(text.contains("fieldhal_device_up{capability=\"camera\",device=\"rear\"} 0"), "\(text)")
        #expect(text.contains("# TYPE fieldhal_api_requests_total counter"), "\(text)")
        #expect(text.contains("fieldhal_api_requests_total{door=\"socket\",route=\"/v1/status\",status=\"200\"}"), "\(text)")
        #expect(text.contains("fieldhal_api_requests_total{door=\"socket\",route=\"other\",status=\"404\"} 1"),
                "a path no route has is counted as other, not by its name: \(text)")
        #expect(text.contains("fieldhal_build_info{version=\""), "\(text)")
        #expect(!text.contains("/dev/") && !text.contains("reason"), "nothing private: \(text)")
        #expect(!text.contains("process_resident_memory_bytes"), "the process's figures only when asked: \(text)")

        // Nothing else on the metrics port.
        let other = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/v1/status"))
        #expect(other.status == 404, "\(other)")

        // The same text on the socket, for a caller with the status scope.
        let socket = try await Self.overSocket(kit, "/v1/metrics")
        #expect(socket.hasPrefix("HTTP/1.1 200") && socket.contains("fieldhal_device_up{capability=\"camera\",device=\"rear\"} 0"), "\(socket)")
        // Through the web door, a page's token without `status` may not read them.
        let bearer = ["Authorization": "Bearer \(try await HealthTests.token(kit, allow: ["haptics"]))"]
        let refused = try #require(try await LoopbackHTTP.exchange(port: web, "GET", "/v1/metrics", headers: bearer))
        #expect(refused.status == 403, "\(refused)")
        let counted = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics"))
        #expect(counted.body.contains("fieldhal_api_requests_total{door=\"web\",route=\"/v1/metrics\",status=\"403\"} 1"), "\(counted.body)")
    }

    @Test func eventFollowersAreCountedWhileTheyFollow() async throws {
        let port = try LoopbackHTTP.freePort()
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: port))
        defer { Task { try? await kit.stop() } }
        let (fixes, got) = AsyncStream.makeStream(of: Void.self)
        let following = Task { for try await _ in kit.client.events([.fix]) { got.yield() } }
        for await _ in fixes { break }
        let during = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics")).body
        #expect(during.contains("fieldhal_event_followers 1"), "\(during)")
        following.cancel()
        _ = try? await following.value
        // The daemon hears the client go when it next writes to it, within a fix or a keep-alive.
        let deadline = ContinuousClock.now + .seconds(20)
        var after = ""
        while ContinuousClock.now < deadline {
            after = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics")).body
            if after.contains("fieldhal_event_followers 0") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(after.contains("fieldhal_event_followers 0"), "\(after)")
    }

    /// A receiver's fixes are counted as the daemon's shared watch hears them, only while
    /// someone follows it: the metrics never start a watch of their own.
    @Test func fixesAreCountedOnlyWhileSomeoneFollowsTheReceiver() async throws {
        let port = try LoopbackHTTP.freePort()
        let kit = try await DaemonServiceTests.Running.start(configuration: """
            [gps]
            plugin = "fake"
            interval_ms = 100
            track = [{ lat = 52.52, lon = 13.40, acc = 4.5 }, { lat = 52.53, lon = 13.41, acc = 6.0 }]
            [metrics]
            listen = "127.0.0.1:\(port)"
            """)
        defer { Task { try? await kit.stop() } }
        let host = try #require(kit.daemon.api.value)
        try await Task.sleep(for: .milliseconds(300))  // three of the receiver's reports, were it watched
        let idle = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics")).body
        #expect(idle.contains("fieldhal_gps_fixes_total{device=\"default\"} 0") && !idle.contains("fieldhal_gps_fix_age_seconds"), "\(idle)")
        #expect(!(try host.location()).isWatching, "a scrape starts no watch")

        let (fixes, got) = AsyncStream.makeStream(of: Void.self)
        let following = Task { for try await _ in kit.client.events([.fix]) { got.yield() } }
        var heard = 0
        for await _ in fixes {
            heard += 1
            if heard == 3 { break }
        }
        let during = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics")).body
        let count = during.split(separator: "\n").first { $0.hasPrefix("fieldhal_gps_fixes_total{device=\"default\"} ") }
        #expect((count?.split(separator: " ").last).flatMap { Int($0) }.map { $0 >= 3 } == true, "\(during)")
        #expect(during.contains("fieldhal_gps_fix_age_seconds{device=\"default\"} "), "\(during)")
        #expect(during.contains("fieldhal_gps_horizontal_accuracy_metres{device=\"default\"} 4.5")
                || during.contains("fieldhal_gps_horizontal_accuracy_metres{device=\"default\"} 6"), "\(during)")
        #expect(during.components(separatedBy: "# TYPE fieldhal_gps_fixes_total").count == 2, "one header per family: \(during)")
        following.cancel()
        _ = try? await following.value
    }

    /// A device unplugged and back: each change counted by the state it changed to.
    @Test func aDeviceThatGoesAndComesBackIsCountedEachTime() async throws {
        let port = try LoopbackHTTP.freePort()
        let kit = try await DaemonServiceTests.Running.start(
            configuration: "[gps]\nplugin = \"fake\"\n[camera]\nplugin = \"fake\"\n[metrics]\nlisten = \"127.0.0.1:\(port)\"\n")
        defer { Task { try? await kit.stop() } }
        let host = try #require(kit.daemon.api.value)
        let camera = DeviceKey(.camera, "default")
        for _ in 0..<2 {
            #expect(await host.detach(camera, reason: "unplugged") != nil)
            let gone = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics")).body
            #expect(gone.contains("fieldhal_device_up{capability=\"camera\",device=\"default\"} 0"), "\(gone)")
            let environment = kit.daemon.current
            let back = await host.attach([camera]) { only in await environment.loadKit(devices: only) }
            #expect(back.first?.isAvailable == true, "\(back)")
        }
        let text = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics")).body
        #expect(text.contains("fieldhal_device_changes_total{capability=\"camera\",device=\"default\",state=\"unavailable\"} 2"), "\(text)")
        #expect(text.contains("fieldhal_device_changes_total{capability=\"camera\",device=\"default\",state=\"available\"} 2"), "\(text)")
        #expect(text.contains("fieldhal_device_up{capability=\"camera\",device=\"default\"} 1"), "\(text)")
    }

    @Test func theProcessFiguresWhenAskedFor() async throws {
        let port = try LoopbackHTTP.freePort()
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: port, process: true))
        defer { Task { try? await kit.stop() } }
        let text = try #require(try await LoopbackHTTP.exchange(port: port, "GET", "/metrics")).body
        let resident = text.split(separator: "\n").first { $0.hasPrefix("process_resident_memory_bytes ") }
        #expect((resident?.split(separator: " ").last).flatMap { Double($0) }.map { $0 > 1_000_000 } == true, "\(text)")
        #expect(text.contains("\nprocess_open_fds ") && text.contains("\nfieldhal_process_threads "), "\(text)")
    }

    @Test(arguments: ["0.0.0.0:9464", "192.168.1.4:9464", "127.0.0.1", "127.0.0.1:70000"])
    func onlyALoopbackPortIsTaken(_ listen: String) throws {
        let state = NSTemporaryDirectory() + "fieldhal-metrics-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: state) }
        try "[gps]\nplugin = \"fake\"\n[metrics]\nlisten = \"\(listen)\"\n".write(toFile: state + "/kit.toml", atomically: true, encoding: .utf8)
        let options = try GlobalOptions.parse(["--config", state + "/kit.toml", "--state-dir", state])
        #expect {
            _ = try Daemon(options: options, logger: Logger(label: "test"), uploadInterval: .seconds(1), verifyInterval: .seconds(5))
        } throws: { error in
            "\(error)".contains("metrics.listen")
        }
    }

    /// Debian's Prometheus server scrapes the daemon every second; its query API then
    /// returns each device's state as the kit has it.
    @Test func aRealPrometheusScrapesTheKit() async throws {
        let binary = "/usr/bin/prometheus"
        try #require(FileManager.default.isExecutableFile(atPath: binary), "no \(binary): lab/packages test installs it")
        let port = try LoopbackHTTP.freePort(), server = try LoopbackHTTP.freePort()
        let kit = try await DaemonServiceTests.Running.start(configuration: Self.kit(port: port))
        defer { Task { try? await kit.stop() } }
        let place = kit.state + "/prometheus"
        try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: true)
        try """
            global:
              scrape_interval: 1s
            scrape_configs:
              - job_name: fieldhal
                static_configs:
                  - targets: ["127.0.0.1:\(port)"]
            """.write(toFile: place + "/prometheus.yml", atomically: true, encoding: .utf8)
        let prometheus = try DaemonProcess(["--config.file=\(place)/prometheus.yml", "--storage.tsdb.path=\(place)/data",
                                            "--web.listen-address=127.0.0.1:\(server)"], command: [], executable: binary)
        #expect(await prometheus.waitForLine(containing: "Server is ready to receive web requests", timeout: .seconds(60)) != nil,
                "\(prometheus.output.suffix(20).joined(separator: "\n"))")
        var results: [[String: Any]] = []
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let query = "/api/v1/query?query=fieldhal_device_up"
            if let answer = try await LoopbackHTTP.exchange(port: server, "GET", query), answer.status == 200,
               let body = try JSONSerialization.jsonObject(with: Data(answer.body.utf8)) as? [String: Any],
               let data = body["data"] as? [String: Any], let found = data["result"] as? [[String: Any]], found.count == 2 {
                results = found
                break
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        _ = await prometheus.stop()
        let states = Dictionary(uniqueKeysWithValues: results.compactMap { result -> (String, String)? in
            guard let metric = result["metric"] as? [String: String], let value = result["value"] as? [Any], let number = value.last as? String,
                  let capability = metric["capability"], let device = metric["device"] else { return nil }
            #expect(metric["job"] == "fieldhal" && metric["instance"] == "127.0.0.1:\(port)", "\(metric)")
            return ("\(capability).\(device)", number)
        })
        #expect(states == ["gps.default": "1", "camera.rear": "0"], "\(results)")
    }
}
