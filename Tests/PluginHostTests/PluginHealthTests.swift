import FieldHAL
import FieldHALServer
import Foundation
import TestSupport
import Testing

/// A plugin process that dies is a `capability` event: the device unavailable with why, then
/// available again once the plugin serves (issue 44: a crash used to change no event, the
/// device staying "available"). Through the API host, as the daemon composes it.
@Suite(.timeLimit(.minutes(1))) struct PluginHealthTests {
    struct Rig {
        let host: APIHost
        let kit: LockedValue<Kit?>
        let fixtures: PluginFixtures

        init(_ section: String, minor: Int, capabilities: String) async throws {
            let fixtures = try PluginFixtures()
            try fixtures.plugin("probe", manifest: PluginFixtures.manifest(name: "probe", minor: minor, capabilities: capabilities))
            let (registry, _) = PluginRegistry.adding(externalPluginsTo: PluginRegistry([]), directories: [fixtures.root])
            let configuration = try KitConfiguration.parse(section, file: "kit.toml", directory: fixtures.root, registry: registry)
            let context = PluginContext(configDirectory: fixtures.root, stateDirectory: fixtures.root)
            let kit = LockedValue<Kit?>(nil)
            host = await APIHost.start(identity: .init(version: "test", pid: getpid(), startedAt: Date(), configurationFile: "kit.toml"),
                                       authorisation: APIAuthorisation(configurationFile: "kit.toml")) { only in
                let loaded = await Kit.load(configuration, registry: registry, context: context, devices: only)
                kit.withLock { $0 = loaded }
                return loaded
            }
            self.kit = kit
            self.fixtures = fixtures
        }

        /// Kills the plugin's process.
        func killPlugin() throws {
            let processes = fixtures.leftovers().filter { $0.contains("fixture-plugin.py") }
            try #require(processes.count == 1, "\(processes)")
            kill(try #require(processes[0].split(separator: ":").first.flatMap { Int32($0) }), SIGKILL)
        }

        func close() async {
            await host.close()
            let by = ContinuousClock.now + .seconds(5)
            while !fixtures.leftovers().isEmpty, ContinuousClock.now < by { try? await Task.sleep(for: .milliseconds(50)) }
        }
    }

    static let receiver = #"{"gps": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the receiver's tty"}]}}"#
    static let reader = #"{"nfc": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the reader's tty"}]}}"#

    /// The next `capability` events of `capability` until `done` says so.
    func events(_ stream: AsyncThrowingStream<CapabilityStatus, any Error>, of capability: Capability,
                until done: ([CapabilityStatus]) -> Bool) async throws -> [CapabilityStatus] {
        var seen: [CapabilityStatus] = []
        for try await status in stream where status.capability == capability {
            seen.append(status)
            if done(seen) { break }
        }
        return seen
    }

    /// A receiver's plugin (in a process of its own before 1.6, shared since) is started
    /// again by the host: unavailable, then available, with no request.
    @Test(arguments: [0, 6]) func aReceiversPluginThatDiesIsUnavailableUntilItServesAgain(minor: Int) async throws {
        let rig = try await Rig("[gps]\nplugin = \"probe\"\ndevice = \"/dev/ttyFIXTURE\"\n", minor: minor, capabilities: Self.receiver)
        #expect(rig.host.capabilities.capabilities.first { $0.capability == .location }?.isAvailable == true)
        let changes = rig.host.capabilityEvents()
        try rig.killPlugin()
        let seen = try await events(changes, of: .location) { $0.last?.isAvailable == true }
        let down = try #require(seen.first)
        #expect(down.state == .unavailable && down.name == "default", "\(seen)")
        #expect(down.reason?.contains("killed by signal 9") == true && down.reason?.contains("starting it again") == true, "\(seen)")
        #expect(down.device == "fixture /dev/ttyFIXTURE (plugin probe)", "the device is still the one it was: \(down)")
        #expect(seen.last?.isAvailable == true && seen.last?.reason == nil)
        #expect(rig.host.devices.first { $0.capability == .location }?.isAvailable == true)
        await rig.close()
    }

    /// A request-driven plugin is started again by the next request: until then the API
    /// says the reader is down and why; a read through the held kit starts it and the reader
    /// is available again.
    @Test func aReadersPluginThatDiesIsUnavailableUntilTheNextRequestStartsIt() async throws {
        let rig = try await Rig("[nfc]\nplugin = \"probe\"\ndevice = \"/dev/ttyFIX1\"\n", minor: 6, capabilities: Self.reader)
        let changes = rig.host.capabilityEvents()
        try rig.killPlugin()
        // The host hears the process end by itself; nothing asks the reader anything yet.
        let down = try #require(try await events(changes, of: .nfcReader) { _ in true }.first)
        #expect(down.state == .unavailable && down.reason?.contains("at the next nfc-1 request") == true, "\(down)")
        let reported = rig.host.devices.first { $0.capability == .nfcReader }
        #expect(reported?.state == .unavailable && reported?.reason == down.reason, "GET /v1/devices says so too: \(String(describing: reported))")
        #expect(rig.host.capabilities.capabilities.first { $0.capability == .nfcReader }?.state == .unavailable)
        // The held kit still reaches the reader: a read is what starts the plugin again (it
        // waits for the start, 0.5 s after the failure: within the 2 s a request waits).
        let reader = try #require(try rig.kit.value?.nfcReader())
        let tag = try await reader.readTag(timeout: .seconds(2))
        #expect(tag.ndef != nil)
        let back = try #require(try await events(changes, of: .nfcReader) { $0.last?.isAvailable == true }.last)
        #expect(back.isAvailable && back.reason == nil)
        #expect(rig.host.devices.first { $0.capability == .nfcReader }?.isAvailable == true)
        await rig.close()
    }
}
