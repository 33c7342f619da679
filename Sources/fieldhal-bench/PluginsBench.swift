import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALCommandLine
import FieldHALPluginHost
import FieldHALPlugins
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-bench plugins`: what running a backend out of process costs. The gpsd backend
/// in this process and the same backend in a plugin process (`fieldhal plugin serve gpsd`
/// behind a manifest, through the plugin protocol) are fed the same gpsd reports.
struct PluginsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugins",
        abstract: "The gpsd and libnfc backends in process vs out of process (a plugin process): fix latency, NFC read time, memory, CPU at rest.",
        discussion: """
        Needs gpsd and gpsd-clients (gpsfake); no receiver. A private gpsd replays a generated \
        NMEA log through a relay that stamps each report as it hands it on, to two clients: \
        the gpsd plugin's watch() in this process, and the same plugin in a plugin process of \
        its own (a scratch plugin directory whose executable runs `fieldhal plugin serve \
        gpsd`), whose fixes reach this process over the plugin protocol. Twice: each report \
        to one client in turn (each path alone), then to both at once. Then one wake-up \
        through a socket on this machine (a thread blocked in read, woken by a write after an \
        epoch's idle): a second process on a fix's way costs at least one, so (in process + \
        one wake-up) / in process is the floor under the ratio. Then the plugin \
        process at rest: connected to a gpsd with no receiver, its CPU time over \
        --rest-seconds, and its peak memory. Then NFC: two PN532 emulators on ptys \
        (Tests/TestSupport/Peers/pn532-emulator.py; needs python3), one read by the libnfc \
        plugin in this process and one by the same plugin in a plugin process, read by turns, \
        each read timed from the call to the decoded tag (and from the emulator's stamp of the \
        tag's selection, the answer's way alone). Then stills and clips: the fake plugin's \
        camera and speaker in this process and out of process (protocol 1.3: the JPEG and \
        the PCM in sealed memfds beside the messages), by turns, each call timed whole. \
        Then, where /dev/uinput exists (the \
        kernel lab), haptics: two uinput force-feedback devices, a pattern's start timed from \
        play() to the device's first play event. Issue 21's goals: fixes out of process at \
        most 1.2× in process; at most 1 ms added per NFC read; no CPU at rest.
        """)

    @Option(help: "Epochs (one TPV report each) per phase.") var epochs = 300
    @Option(help: "Seconds gpsfake waits between sentences (3 sentences an epoch).") var cycle = 0.01
    @Option(help: "Seconds the plugin process is watched at rest.") var restSeconds = 10.0
    @Option(help: "NFC reads per path (in process, out of process).") var nfcReads = 100
    @Option(help: "The PN532 emulator script (the NFC phase).") var emulator = "Tests/TestSupport/Peers/pn532-emulator.py"
    @Option(help: "Patterns played per path (the haptics phase; needs /dev/uinput: run it in the kernel lab).") var hapticsPlays = 50
    @Option(help: "Stills taken and clips played per path (the media phase).") var mediaCalls = 100
    @Option(help: "The stills' width in pixels (the media phase).") var stillWidth = 640
    @Option(help: "The stills' height in pixels (the media phase).") var stillHeight = 480
    @Option(help: "The uinput force-feedback peer script (the haptics phase).") var hapticsPeer = "Tests/TestSupport/Peers/uinput-ff.py"
    @Flag(help: "Print the result as JSON.") var json = false

    struct Report: Encodable {
        struct Latency: Encodable {
            var samples: Int
            var inProcessMedianMs, inProcessP95Ms, outOfProcessMedianMs, outOfProcessP95Ms, ratio: Double
        }
        struct Rest: Encodable { var seconds: Double; var pluginCPUSeconds: Double; var pluginCPUPercent: Double }
        /// One wake-up through a socket on this machine (`WakeUpFloor`), and the ratio a
        /// second process would give if it added nothing else: in process alone + one wake-up,
        /// over in process alone. No plugin process can do better here.
        struct Floor: Encodable { var wakeUpMedianMs, wakeUpP95Ms, floorRatioAlone: Double }
        struct HapticsStarts: Encodable {
            var samples: Int
            /// play() asked → the device's first play event (the motor starts).
            var inProcessMedianMs, inProcessP95Ms, outOfProcessMedianMs, outOfProcessP95Ms, addedMedianMs: Double
        }
        struct NFCReads: Encodable {
            var samples: Int
            /// The whole call: readTag asked → the decoded tag returned.
            var inProcessMedianMs, inProcessP95Ms, outOfProcessMedianMs, outOfProcessP95Ms, addedMedianMs: Double
            /// From the emulator's stamp of the tag's selection to the decoded tag (the answer's way only).
            var selectedToDecodedInMedianMs, selectedToDecodedOutMedianMs: Double
        }
        /// A call through the fake camera or speaker, whole: in process, out of process.
        struct MediaCalls: Encodable {
            var samples: Int
            var bytes: Int
            var inProcessMedianMs, inProcessP95Ms, outOfProcessMedianMs, outOfProcessP95Ms, addedMedianMs: Double
        }
        var machine: String
        var alone: Latency
        var atOnce: Latency
        var floor: Floor
        var rest: Rest
        var pluginPeakRSSKiB: Int
        var pluginRSSKiB: Int
        var nfc: NFCReads
        var stills: MediaCalls
        var clips: MediaCalls
        /// Nil where there is no /dev/uinput (`skipped` says so).
        var haptics: HapticsStarts?
        var hapticsSkipped: String?
    }

    func run() async throws {
        try await reportingFailures { try await measure() }
    }

    func measure() async throws {
        guard epochs >= 20, cycle > 0, restSeconds > 0, nfcReads >= 10, hapticsPlays >= 10, mediaCalls >= 10,
              (16...4096).contains(stillWidth), (16...4096).contains(stillHeight) else {
            throw FieldHALError(.invalidArgument, subject: "bench plugins",
                                detail: "--epochs must be at least 20, --nfc-reads, --haptics-plays and --media-calls at least 10, --cycle and --rest-seconds positive, --still-width and --still-height 16 to 4096")
        }
        guard let libnfc = BuiltinPlugins.registry.plugin(named: "libnfc") else {
            throw FieldHALError(.unavailable, subject: "bench plugins", detail: "this fieldhal was built without the NFC trait")
        }
        guard FileManager.default.fileExists(atPath: emulator) else {
            throw FieldHALError(.unavailable, subject: "bench plugins", detail: "no PN532 emulator at \(emulator)",
                                advice: "run from the repository's root or pass --emulator PATH")
        }
        let setup = try GPSBenchSetup.make("bench plugins", tools: ["/usr/bin/gpsfake", "/usr/sbin/gpsd"], epochs: epochs)
        defer { setup.remove() }
        let (gpsd, directory, log) = (setup.gpsd, setup.directory, setup.log)
        let external = try installExternal(gpsd, serving: "gpsd", in: directory)

        let alone = try await measureLatency(gpsd, external, log: log, oneClientPerReport: true)
        let atOnce = try await measureLatency(gpsd, external, log: log, oneClientPerReport: false)
        let wakeUp = try await WakeUpFloor.measure(idle: .seconds(cycle * 3))
        let floor = Report.Floor(wakeUpMedianMs: wakeUp.medianMs, wakeUpP95Ms: wakeUp.p95Ms,
                                 floorRatioAlone: (alone.inProcessMedianMs + wakeUp.medianMs) / alone.inProcessMedianMs)
        let (rest, peak, resident) = try await measureRest(external, directory: directory)
        let nfc = try await measureNFC(libnfc, try installExternal(libnfc, serving: "libnfc", in: directory), directory: directory)
        let fake = BuiltinPlugins.registry.plugin(named: "fake")!  // always built in
        let (stills, clips) = try await measureMedia(fake, try installExternal(fake, serving: "fake", in: directory), directory: directory)
        var haptics: Report.HapticsStarts?
        var hapticsSkipped: String?
        if let evdev = BuiltinPlugins.registry.plugin(named: "evdev"), FileManager.default.fileExists(atPath: "/dev/uinput"),
           FileManager.default.fileExists(atPath: hapticsPeer) {
            haptics = try await measureHaptics(evdev, try installExternal(evdev, serving: "evdev", in: directory), directory: directory)
        } else {
            hapticsSkipped = "needs the evdev plugin, /dev/uinput and \(hapticsPeer): run `lab/kernel-lab .build/release/fieldhal-bench plugins`"
        }
        let report = Report(machine: GPSBench.machine, alone: alone, atOnce: atOnce, floor: floor, rest: rest, pluginPeakRSSKiB: peak, pluginRSSKiB: resident,
                            nfc: nfc, stills: stills, clips: clips, haptics: haptics, hapticsSkipped: hapticsSkipped)
        try Output.emit(report, json: json) {
            func line(_ name: String, _ latency: Report.Latency) -> String {
                """
                \(name) (\(latency.samples) reports):
                  in process      median \(format(latency.inProcessMedianMs)) ms  p95 \(format(latency.inProcessP95Ms)) ms
                  out of process  median \(format(latency.outOfProcessMedianMs)) ms  p95 \(format(latency.outOfProcessP95Ms)) ms
                  ratio (out / in medians)  \(format(latency.ratio))
                """
            }
            return """
            machine: \(report.machine)
            fix latency, gpsd report to consumer, the gpsd backend
            \(line("each alone", alone))
            \(line("at once", atOnce))
            one wake-up through a socket on this machine: median \(format(floor.wakeUpMedianMs)) ms  p95 \(format(floor.wakeUpP95Ms)) ms
              the floor for any plugin process, alone: (in process + one wake-up) / in process = \(format(floor.floorRatioAlone))
            the plugin process: RSS \(resident) KiB (peak \(peak) KiB); at rest for \(format(rest.seconds)) s: \
            CPU \(format(rest.pluginCPUSeconds)) s (\(format(rest.pluginCPUPercent)) %)
            NFC read, readTag asked → tag decoded, the libnfc backend on the PN532 emulator (\(nfc.samples) reads each):
              in process      median \(format(nfc.inProcessMedianMs)) ms  p95 \(format(nfc.inProcessP95Ms)) ms
              out of process  median \(format(nfc.outOfProcessMedianMs)) ms  p95 \(format(nfc.outOfProcessP95Ms)) ms
              added out of process (medians)  \(format(nfc.addedMedianMs)) ms
              tag selected → decoded (the answer's way): in \(format(nfc.selectedToDecodedInMedianMs)) ms, out \(format(nfc.selectedToDecodedOutMedianMs)) ms
            \(media("a \(stillWidth)x\(stillHeight) still from the fake camera", stills))
            \(media("the soft alert played by the fake speaker", clips))
            \(haptics.map { haptics in """
            haptics pattern start, play() asked → the motor starts, the evdev backend on uinput (\(haptics.samples) plays each):
              in process      median \(format(haptics.inProcessMedianMs)) ms  p95 \(format(haptics.inProcessP95Ms)) ms
              out of process  median \(format(haptics.outOfProcessMedianMs)) ms  p95 \(format(haptics.outOfProcessP95Ms)) ms
              added out of process (medians)  \(format(haptics.addedMedianMs)) ms
            """ } ?? "haptics pattern start: skipped (\(hapticsSkipped ?? ""))")
            """
        }
    }

    private func format(_ value: Double) -> String { String(format: "%.3f", value) }

    private func media(_ name: String, _ calls: Report.MediaCalls) -> String {
        """
        \(name), the whole call (\(calls.samples) each, \(calls.bytes) bytes in a sealed memfd out of process):
          in process      median \(format(calls.inProcessMedianMs)) ms  p95 \(format(calls.inProcessP95Ms)) ms
          out of process  median \(format(calls.outOfProcessMedianMs)) ms  p95 \(format(calls.outOfProcessP95Ms)) ms
          added out of process (medians)  \(format(calls.addedMedianMs)) ms
        """
    }

    /// The fake camera's stills and the fake speaker's clips (not played in real time), in
    /// this process and out of process by turns: what the memfds and the crossing add to a
    /// call whose device work is the same on both paths.
    private func measureMedia(_ fake: PluginDescriptor, _ external: PluginDescriptor, directory: String) async throws -> (Report.MediaCalls, Report.MediaCalls) {
        let context = PluginContext(configDirectory: "/", stateDirectory: directory)
        var cameras: [any Camera] = [], speakers: [any Speaker] = []
        for descriptor in [fake, external] {
            guard case .camera(let camera) = try await descriptor.open(.camera, PluginParameters([:]), context),
                  case .speaker(let speaker) = try await descriptor.open(.speaker, PluginParameters(["realtime": .boolean(false)]), context) else {
                throw FieldHALError(.unavailable, subject: "bench plugins", detail: "the fake plugin opened no camera or speaker")
            }
            cameras.append(camera)
            speakers.append(speaker)
        }
        do {
            let measured = try await measureMedia(cameras, speakers)
            for device in cameras as [any Device] + speakers as [any Device] { await device.close() }
            return measured
        } catch {
            for device in cameras as [any Device] + speakers as [any Device] { await device.close() }
            throw error
        }
    }

    private func measureMedia(_ cameras: [any Camera], _ speakers: [any Speaker]) async throws -> (Report.MediaCalls, Report.MediaCalls) {
        let request = PhotoRequest(width: stillWidth, height: stillHeight, quality: 85, warmUpFrames: 0)
        let clip = SoundClip.softAlert()
        var bytes = 0
        for camera in cameras { bytes = try await camera.captureStill(request).jpeg.count }  // each path's first call pays its start
        for speaker in speakers { try await speaker.play(clip) }
        var stills: [[Double]] = [[], []], clips: [[Double]] = [[], []]
        for _ in 0..<mediaCalls {
            for index in 0..<2 {
                var started = ContinuousClock.now
                _ = try await cameras[index].captureStill(request)
                stills[index].append((ContinuousClock.now - started).seconds * 1000)
                started = ContinuousClock.now
                try await speakers[index].play(clip)
                clips[index].append((ContinuousClock.now - started).seconds * 1000)
            }
        }
        func calls(_ times: [[Double]], bytes: Int) -> Report.MediaCalls {
            let inside = GPSBench.percentile(times[0], 0.5), outside = GPSBench.percentile(times[1], 0.5)
            return .init(samples: mediaCalls, bytes: bytes, inProcessMedianMs: inside, inProcessP95Ms: GPSBench.percentile(times[0], 0.95),
                         outOfProcessMedianMs: outside, outOfProcessP95Ms: GPSBench.percentile(times[1], 0.95), addedMedianMs: outside - inside)
        }
        return (calls(stills, bytes: bytes), calls(clips, bytes: clip.samples.count * 2))
    }

    /// A plugin directory serving a built-in plugin through the fieldhal beside this binary.
    private func installExternal(_ builtIn: PluginDescriptor, serving name: String, in directory: String) throws -> PluginDescriptor {
        let plugin = directory + "/\(name)-process"
        try FileManager.default.createDirectory(atPath: plugin, withIntermediateDirectories: true)
        let manifest = PluginManifest.json(for: builtIn, name: "\(name)-process", version: FieldHALVersion.current, executable: "run")
        try JSONEncoder().encode(manifest).write(to: URL(fileURLWithPath: plugin + "/plugin.json"))
        let binary = try Sibling.fieldhal()
        try "#!/bin/sh\nexec '\(binary)' plugin serve \(name) --name \(name)-process\n".write(toFile: plugin + "/run", atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: plugin + "/run")
        return try PluginManifest.load(plugin + "/plugin.json").descriptor()
    }

    private func measureLatency(_ gpsd: PluginDescriptor, _ external: PluginDescriptor, log: String,
                                oneClientPerReport: Bool) async throws -> Report.Latency {
        let feed = try BenchProcess.start("/usr/bin/gpsfake", ["-1", "-p", "-q", "-c", String(cycle), "-P", String(try TCP.freePort()), log])
        defer { feed.kill() }
        let gpsdPort = Int(feed.arguments[feed.arguments.firstIndex(of: "-P")! + 1])!
        try await GPSBench.waitForListener(port: gpsdPort)
        let relay = try LineRelay(upstreamPort: gpsdPort, oneClientPerReport: oneClientPerReport)
        relay.start()
        let inside = try await GPSBench.openLocation(gpsd, port: relay.port)
        let outside = try await GPSBench.openLocation(external, port: relay.port)
        let received = LockedValue<[Int: [String: Double]]>([0: [:], 1: [:]])
        // Each consumer stamps a fix where it is handed over: on the provider's own thread.
        let subscriptions = [inside, outside].enumerated().map { index, provider in
            provider.follow({ fix in
                let now = Date().timeIntervalSince1970
                let key = TPVKey.of(fix.time)
                received.withLock { $0[index]![key] = $0[index]![key] ?? now }
            }, end: { _ in })
        }
        try await relay.waitForTheFeedToEnd(within: .seconds(Double(epochs) * cycle * 3 + 60))
        for subscription in subscriptions { subscription.cancel() }
        await inside.close()
        await outside.close()

        var inProcess: [Double] = [], outOfProcess: [Double] = []
        let seen = received.value
        for (key, sent) in relay.forwardTimes {
            if let at = seen[0]?[key] { inProcess.append((at - sent) * 1000) }
            if let at = seen[1]?[key] { outOfProcess.append((at - sent) * 1000) }
        }
        let least = oneClientPerReport ? max(5, epochs / 4) : max(10, epochs / 2)
        guard inProcess.count >= least, outOfProcess.count >= least else {
            throw FieldHALError(.timeout, subject: "bench plugins",
                                detail: "only \(inProcess.count) and \(outOfProcess.count) of \(epochs) reports reached the two consumers")
        }
        let ours = GPSBench.percentile(inProcess, 0.5), theirs = GPSBench.percentile(outOfProcess, 0.5)
        return .init(samples: min(inProcess.count, outOfProcess.count),
                     inProcessMedianMs: ours, inProcessP95Ms: GPSBench.percentile(inProcess, 0.95),
                     outOfProcessMedianMs: theirs, outOfProcessP95Ms: GPSBench.percentile(outOfProcess, 0.95),
                     ratio: ours > 0 ? theirs / ours : .nan)
    }

    /// Two PN532 emulators, one per path, read by turns so that both meet the same machine;
    /// each read from the emulator's stamp of its selection (CLOCK_MONOTONIC) to the decoded
    /// tag in this process.
    private func measureNFC(_ libnfc: PluginDescriptor, _ external: PluginDescriptor, directory: String) async throws -> Report.NFCReads {
        var chips: [BenchProcess] = []
        defer { for chip in chips { chip.kill() } }
        var readers: [any NFCReader] = []
        var events: [String] = []
        let context = PluginContext(configDirectory: "/", stateDirectory: directory)
        for (index, descriptor) in [libnfc, external].enumerated() {
            let log = directory + "/nfc-\(index).jsonl"
            chips.append(try BenchProcess.start("/usr/bin/python3", [emulator, "--text", "trf:duress:bench-alert-0001"], output: log))
            let connstring = "pn532_uart:" + (try await NFCBench.firstLine(of: log))
            guard case .nfcReader(let reader) = try await descriptor.open(.nfcReader, PluginParameters(["connstring": .string(connstring)]), context) else {
                throw FieldHALError(.unavailable, subject: "bench plugins", detail: "the libnfc plugin opened no reader")
            }
            readers.append(reader)
            events.append(log)
        }
        // One read each first: the first read of a plugin process pays for its start.
        for reader in readers { _ = try await reader.readTag(timeout: .seconds(5)) }
        var before: [Int] = []
        for log in events { before.append(try await NFCBench.settledSelections(in: log, count: 1).count) }
        var finished: [[UInt64]] = [[], []]
        var calls: [[Double]] = [[], []]
        for _ in 0..<nfcReads {
            for (index, reader) in readers.enumerated() {
                let asked = NFCBench.monotonicNanoseconds()
                let tag = try await reader.readTag(timeout: .seconds(5))
                let done = NFCBench.monotonicNanoseconds()
                finished[index].append(done)
                calls[index].append(Double(done - asked) / 1e6)
                guard tag.ndef?.records.isEmpty == false else {
                    throw FieldHALError(.protocolError, subject: "bench plugins", detail: "an NFC read returned no NDEF message")
                }
            }
        }
        for reader in readers { await reader.close() }
        var latencies: [[Double]] = []
        for (index, log) in events.enumerated() {
            let selected = Array(try await NFCBench.settledSelections(in: log, count: before[index] + nfcReads).dropFirst(before[index]))
            latencies.append(zip(selected, finished[index]).map { Double($1 - $0) / 1e6 })
        }
        let inside = GPSBench.percentile(calls[0], 0.5), outside = GPSBench.percentile(calls[1], 0.5)
        return .init(samples: nfcReads, inProcessMedianMs: inside, inProcessP95Ms: GPSBench.percentile(calls[0], 0.95),
                     outOfProcessMedianMs: outside, outOfProcessP95Ms: GPSBench.percentile(calls[1], 0.95),
                     addedMedianMs: outside - inside,
                     selectedToDecodedInMedianMs: GPSBench.percentile(latencies[0], 0.5),
                     selectedToDecodedOutMedianMs: GPSBench.percentile(latencies[1], 0.5))
    }

    /// Two uinput force-feedback devices (the peer script), one per path, played by turns: a
    /// one-step pattern each time, from the `play` call to the device's first play event
    /// (CLOCK_MONOTONIC on both sides).
    private func measureHaptics(_ evdev: PluginDescriptor, _ external: PluginDescriptor, directory: String) async throws -> Report.HapticsStarts {
        var peers: [BenchProcess] = []
        defer { for peer in peers { peer.kill() } }
        var engines: [any HapticsEngine] = []
        var logs: [String] = []
        let context = PluginContext(configDirectory: "/", stateDirectory: directory)
        for (index, descriptor) in [evdev, external].enumerated() {
            let log = directory + "/uinput-\(index).jsonl"
            peers.append(try BenchProcess.start("/usr/bin/python3", [hapticsPeer, "--name", "bench pad \(index)"], output: log))
            let ready = try await Self.events(in: log, named: "ready", count: 1, within: .seconds(5))
            guard let node = ready.first?["node"] as? String else {
                throw FieldHALError(.unavailable, subject: "bench plugins", detail: "the uinput peer made no device")
            }
            guard case .haptics(let engine) = try await descriptor.open(.haptics, PluginParameters(["device": .string(node)]), context) else {
                throw FieldHALError(.unavailable, subject: "bench plugins", detail: "the evdev plugin opened no haptics")
            }
            engines.append(engine)
            logs.append(log)
        }
        let buzz = HapticPattern.custom([HapticStep(.rumble(strong: 0.5, weak: 0.5), durationMilliseconds: 20)])
        for engine in engines { try await engine.play(buzz) }  // the first play of a plugin process pays for its start
        var asked: [[Double]] = [[], []]
        for _ in 0..<hapticsPlays {
            for (index, engine) in engines.enumerated() {
                asked[index].append(Double(NFCBench.monotonicNanoseconds()) / 1e9)
                try await engine.play(buzz)
            }
        }
        for engine in engines { await engine.close() }
        var starts: [[Double]] = []
        for (index, log) in logs.enumerated() {
            let started = try await Self.events(in: log, named: "play", count: hapticsPlays + 1, within: .seconds(5)) { $0["value"] as? Int == 1 }
            let times = started.dropFirst().compactMap { ($0["t"] as? NSNumber)?.doubleValue }
            starts.append(zip(times, asked[index]).map { ($0 - $1) * 1000 })
        }
        let inside = GPSBench.percentile(starts[0], 0.5), outside = GPSBench.percentile(starts[1], 0.5)
        return .init(samples: hapticsPlays, inProcessMedianMs: inside, inProcessP95Ms: GPSBench.percentile(starts[0], 0.95),
                     outOfProcessMedianMs: outside, outOfProcessP95Ms: GPSBench.percentile(starts[1], 0.95), addedMedianMs: outside - inside)
    }

    /// The peer's events of one kind (JSON lines), once there are `count` of them.
    private static func events(in log: String, named name: String, count: Int, within bound: Duration,
                               where matches: ([String: Any]) -> Bool = { _ in true }) async throws -> [[String: Any]] {
        let deadline = ContinuousClock.now + bound
        while true {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            let found = text.split(whereSeparator: \.isNewline).compactMap { line -> [String: Any]? in
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      object["event"] as? String == name, matches(object) else { return nil }
                return object
            }
            if found.count >= count { return found }
            guard ContinuousClock.now < deadline else {
                throw FieldHALError(.timeout, subject: "bench plugins", detail: "the uinput peer logged \(found.count) of \(count) \(name) events")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// The plugin process watching a gpsd that has no receiver: nothing to say, so it
    /// should sleep. Its CPU time over `restSeconds`, from /proc.
    private func measureRest(_ external: PluginDescriptor, directory: String) async throws -> (Report.Rest, Int, Int) {
        let port = try TCP.freePort()
        let daemon = try BenchProcess.start("/usr/sbin/gpsd", ["-N", "-S", String(port), "-F", directory + "/gpsd.sock"])
        defer { daemon.kill() }
        try await GPSBench.waitForListener(port: port)
        let provider = try await GPSBench.openLocation(external, port: port)
        let watching = provider.follow({ _ in }, end: { _ in })
        try await Task.sleep(for: .seconds(3))  // past the plugin's silence report (2 s)
        guard let pid = Self.pluginProcess() else {
            throw FieldHALError(.unavailable, subject: "bench plugins", detail: "no plugin process among this process's children")
        }
        let start = GPSBench.cpuSeconds(of: pid), wallStart = ContinuousClock.now
        try await Task.sleep(for: .seconds(restSeconds))
        let cpu = GPSBench.cpuSeconds(of: pid) - start, wall = (ContinuousClock.now - wallStart).seconds
        let peak = GPSBench.peakRSSKiB(of: "\(pid)"), resident = GPSBench.statusKiB("VmRSS", of: "\(pid)")
        watching.cancel()
        await provider.close()
        return (.init(seconds: wall, pluginCPUSeconds: cpu, pluginCPUPercent: cpu / wall * 100), peak, resident)
    }

    /// The child of this process running `plugin serve gpsd`: by now the plugin executable
    /// (`fieldhal-plugin gpsd`), which `plugin serve` runs in its place (or the CLI itself, in
    /// a build without it).
    private static func pluginProcess() -> Int32? {
        let me = getpid()
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry),
                  let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let afterName = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: afterName)...].split(separator: " ")
            guard fields.count > 2, Int32(fields[1]) == me,
                  let command = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline")) else { continue }
            let line = String(decoding: command, as: UTF8.self)
            if line.contains("fieldhal-plugin\0gpsd\0") || line.contains("plugin\0serve\0gpsd") { return pid }
        }
        return nil
    }
}
