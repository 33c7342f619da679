import FieldHAL
import FieldHALPluginHost
import Foundation
import Logging
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing

/// A plugin directory made for one test, removed after it.
final class PluginFixtures: @unchecked Sendable {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("fixture-plugin.py").path
    /// The camera, microphone and speaker fixture (protocol 1.3, descriptors beside messages).
    static let mediaScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("media-plugin.py").path
    let root = NSTemporaryDirectory() + "fieldhal-plugins-\(UUID().uuidString.prefix(8))"

    init() throws { try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true) }
    deinit { try? FileManager.default.removeItem(atPath: root) }

    static func manifest(name: String, major: Int = 1, minor: Int = 0, capabilities: String = #"{"gps": {"parameters": [{"name": "device", "type": "string", "required": true, "help": "the receiver's tty"}]}}"#) -> String {
        """
        {"name": "\(name)", "version": "0.3.1", "summary": "a test plugin", "protocol": {"major": \(major), "minor": \(minor)},
         "executable": "run", "capabilities": \(capabilities)}
        """
    }

    /// `DIRECTORY/NAME/plugin.json` beside an executable `run` that starts the fixture in `mode`.
    @discardableResult
    func plugin(_ name: String, mode: String = "good", in directory: String? = nil, manifest: String? = nil,
                script: String = PluginFixtures.script) throws -> String {
        let folder = (directory ?? root) + "/" + name
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let file = folder + "/plugin.json"
        try (manifest ?? Self.manifest(name: name)).write(toFile: file, atomically: true, encoding: .utf8)
        try ExecutableFile.write("#!/bin/sh\nexec python3 \(script) \(mode) \(file)\n", to: folder + "/run")
        return file
    }

    /// A kit loaded from `configuration` (TOML) with the plugins this fixture's directory
    /// holds, as a configuration file would load it.
    func kit(_ configuration: String, logger: Logger = Logger(label: "fieldhal.plugins")) async throws -> Kit {
        let (registry, discovery) = PluginRegistry.adding(externalPluginsTo: PluginRegistry([]), directories: [root], logger: logger)
        #expect(discovery.problems.isEmpty)
        let parsed = try KitConfiguration.parse(configuration, file: "kit.toml", directory: root, registry: registry)
        return await Kit.load(parsed, registry: registry, context: PluginContext(configDirectory: root, stateDirectory: root))
    }

    /// Processes still running whose command line mentions this fixture's directory.
    func leftovers() -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { pid -> String? in
            guard Int32(pid) != nil, let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return nil }
            let line = String(decoding: data.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            return line.contains(root) ? "\(pid): \(line)" : nil
        }
    }
}

@Suite struct PluginManifestTests {
    @Test func aManifestBecomesTheSpecsAConfigurationIsCheckedAgainst() throws {
        let text = """
        {"name": "nmea-serial", "version": "1.2.0", "summary": "GNSS receivers on a serial port",
         "protocol": {"major": 1, "minor": 3}, "executable": "bin/nmea",
         "capabilities": {"gps": {"parameters": [
            {"name": "device", "type": "string", "required": true, "help": "the tty"},
            {"name": "baud", "type": "integer", "help": "its speed"},
            {"name": "track", "type": "records", "help": "points", "fields": [{"name": "lat", "type": "number", "help": "degrees"}]}]},
          "haptics": {}}}
        """
        let manifest = try PluginManifest.parse(Data(text.utf8), file: "/usr/lib/fieldhal/plugins/nmea/plugin.json")
        #expect(manifest.name == "nmea-serial")
        #expect(manifest.protocolVersion == .init(major: 1, minor: 3))
        #expect(manifest.executable == "/usr/lib/fieldhal/plugins/nmea/bin/nmea")
        #expect(manifest.capabilities.keys.sorted() == [.location, .haptics])
        let specs = try #require(manifest.parameterSpecs[.location])
        #expect(specs.map(\.name) == ["device", "baud", "track"])
        #expect(specs[0].isRequired && !specs[1].isRequired)
        #expect(specs.map(\.type.description) == ["a string", "an integer", "an array of tables"])
        guard case .records(let fields) = specs[2].type else { Issue.record("track is not records"); return }
        #expect(fields.map(\.name) == ["lat"])
        #expect(manifest.parameterSpecs[.haptics]?.isEmpty == true)
    }

    static let broken: [(text: String, place: String, says: String)] = [
        ("{\"name\": ", "plugin.json", "not JSON"),
        ("[1, 2]", "plugin.json", "must be a JSON object"),
        (#"{"version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {"gps": {}}}"#, "name", "missing"),
        (#"{"name": "Bad Name", "version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {"gps": {}}}"#, "name", "must be 1–64 characters"),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": "1", "minor": 0}, "executable": "x", "capabilities": {"gps": {}}}"#, "protocol.major", "whole number"),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": true, "minor": 0}, "executable": "x", "capabilities": {"gps": {}}}"#, "protocol.major", "whole number"),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {}}"#, "capabilities", "at least one capability"),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {"lidar": {}}}"#, "capabilities.lidar", "no capability \"lidar\""),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {"gps": {"parameters": [{"name": "d", "type": "float", "help": "h"}]}}}"#, "capabilities.gps.parameters[0].type", "no parameter type \"float\""),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {"gps": {"parameters": [{"name": "d", "type": "string", "help": "h"}, {"name": "d", "type": "string", "help": "h"}]}}}"#, "capabilities.gps.parameters[1].name", "declared twice"),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {"gps": {"parameters": [{"name": "d", "type": "string", "help": "h", "required": "yes"}]}}}"#, "capabilities.gps.parameters[0].required", "true or false"),
        (#"{"name": "p", "version": "1", "summary": "s", "protocol": {"major": 1, "minor": 0}, "executable": "x", "capabilities": {"gps": {"parameters": [{"name": "t", "type": "records", "help": "h"}]}}}"#, "capabilities.gps.parameters[0].fields", "lists its \"fields\""),
    ]

    @Test(arguments: broken.indices)
    func aBrokenManifestSaysWhereAndWhat(_ index: Int) {
        let (text, place, says) = Self.broken[index]
        #expect {
            _ = try PluginManifest.parse(Data(text.utf8), file: "plugin.json")
        } throws: { error in
            guard let error = error as? FieldHALError, error.kind == .malformedData else { return false }
            return error.subject.hasSuffix(place) && error.detail.contains(says)
        }
    }
}

@Suite struct PluginDirectoryTests {
    @Test func theFirstPluginOfANameWinsAndABrokenOneHidesNothing() throws {
        let fixtures = try PluginFixtures()
        let first = fixtures.root + "/first", second = fixtures.root + "/second"
        let alpha = try fixtures.plugin("alpha", in: first)
        try PluginFixtures.manifest(name: "beta").write(toFile: first + "/beta.json", atomically: true, encoding: .utf8)
        try "{ not json".write(toFile: first + "/broken.json", atomically: true, encoding: .utf8)
        try "ignored".write(toFile: first + "/README", atomically: true, encoding: .utf8)
        try fixtures.plugin("alpha", in: second)
        try fixtures.plugin("gpsd", in: second)
        let found = PluginDirectories.discover(in: [first, second, fixtures.root + "/absent"], builtIn: ["gpsd", "fake"])
        #expect(found.plugins.map(\.name) == ["alpha", "beta"])
        #expect(found.plugins.first?.file == alpha)
        #expect(found.shadowed.map { "\($0.manifest.name) by \($0.by)" } == ["alpha by \(alpha)", "gpsd by the built-in plugin"])
        #expect(found.problems.count == 1)
        #expect(found.problems.first?.subject == first + "/broken.json")
    }

    @Test func theSearchPathComesFirst() {
        #expect(PluginDirectories.searched(environment: ["FIELDHAL_PLUGIN_PATH": "/opt/a::/opt/b"])
                == ["/opt/a", "/opt/b", "/etc/fieldhal/plugins.d", "/usr/lib/fieldhal/plugins"])
        #expect(PluginDirectories.searched(environment: [:]) == PluginDirectories.system)
    }
}

/// The handshake against a real plugin process (Python), well-behaved or failing in each
/// way the issue names; after every one, no process of the plugin is left.
@Suite(.timeLimit(.minutes(2))) struct PluginHandshakeTests {
    func check(_ mode: String, manifest: String? = nil, timeout: Duration = .seconds(5)) async throws -> (Result<PluginCheck.Handshake, any Error>, PluginFixtures) {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("probe", mode: mode, manifest: manifest)
        let loaded = try PluginManifest.load(file)
        let result: Result<PluginCheck.Handshake, any Error>
        do { result = .success(try await PluginCheck.handshake(loaded, timeout: timeout)) } catch { result = .failure(error) }
        return (result, fixtures)
    }

    func error(_ result: Result<PluginCheck.Handshake, any Error>) -> FieldHALError? {
        if case .failure(let error) = result { return error as? FieldHALError }
        return nil
    }

    @Test func aGoodPluginAgreesWithItsManifest() async throws {
        let (result, fixtures) = try await check("good")
        let handshake = try result.get()
        #expect(handshake.name == "probe" && handshake.version == "0.3.1")
        // The fixture speaks 1.0, an older minor than the host's: that works.
        #expect(handshake.protocolVersion == PluginProtocol.Version(major: 1, minor: 0) && PluginProtocol.version.minor >= 1)
        #expect(handshake.capabilities == [.location])
        #expect(handshake.duration < .seconds(5))
        #expect(fixtures.leftovers().isEmpty)
    }

    /// A manifest for another major, or one declaring a capability with a protocol older
    /// than the one it is served from, is refused as it is read: `fieldhal plugins` lists
    /// the problem and no kit starts the plugin.
    @Test(arguments: [
        (2, 0, #"{"gps": {}}"#, "protocol", "the plugin speaks plugin protocol 2.0; this FieldHAL speaks", "update FieldHAL"),
        (0, 9, #"{"gps": {}}"#, "protocol", "the plugin speaks plugin protocol 0.9", "update the plugin"),
        (1, 0, #"{"nfc": {}}"#, "capabilities.nfc", "nfc is served from plugin protocol 1.1 on; the manifest says 1.0", "declare (and speak) protocol 1.1"),
        (1, 0, #"{"gps": {}, "speaker": {}}"#, "capabilities.speaker", "speaker is served from plugin protocol 1.3 on", "leave speaker out"),
        (1, 1, #"{"biometrics": {}}"#, "capabilities.biometrics", "biometrics is served from plugin protocol 1.2 on; the manifest says 1.1", "1.2"),
    ]) func aManifestOfAVersionThisHostCannotServeIsRefusedWhenRead(major: Int, minor: Int, capabilities: String,
                                                                    place: String, detail: String, advice: String) throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("probe", mode: "good", manifest: PluginFixtures.manifest(name: "probe", major: major, minor: minor, capabilities: capabilities))
        let refusal = #expect(throws: FieldHALError.self) { try PluginManifest.load(file) }
        #expect(refusal?.kind == .unsupported && refusal?.subject == "\(file): \(place)", "\(String(describing: refusal))")
        #expect(refusal?.detail.contains(detail) == true && refusal?.advice?.contains(advice) == true, "\(String(describing: refusal))")
        let found = PluginDirectories.discover(in: [fixtures.root], builtIn: [])
        #expect(found.plugins.isEmpty && found.problems.first?.detail == refusal?.detail, "\(found.problems)")
    }

    /// A plugin whose handshake names another protocol than its manifest disagrees with it
    /// (the manifest is the contract), whatever the version: not a reason to update FieldHAL.
    @Test func aPluginThatAnswersWithAnotherMajorThanItsManifestDisagrees() async throws {
        let (result, fixtures) = try await check("newer-major")
        #expect(error(result)?.kind == .malformedData)
        #expect(error(result)?.detail.contains("it speaks protocol 2.0, the manifest says 1.0") == true, "\(String(describing: error(result)))")
        #expect(error(result)?.advice?.contains("update FieldHAL") == false)
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func aCrashNamesThePluginWithItsStandardErrorsTail() async throws {
        let (result, fixtures) = try await check("crash")
        let failure = try #require(error(result))
        #expect(failure.kind == .unavailable)
        #expect(failure.subject == "plugin probe")
        #expect(failure.detail.contains("killed by signal 6"), "\(failure)")
        #expect(failure.detail.contains("cannot open /dev/ttyFIXTURE"), "\(failure)")
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func aPluginThatNeverAnswersTimesOutAndIsKilled() async throws {
        let start = ContinuousClock.now
        let (result, fixtures) = try await check("silent", timeout: .seconds(1))
        #expect(error(result)?.kind == .timeout)
        #expect(ContinuousClock.now - start < .seconds(8))
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func garbageAndOversizedMessagesAreTheProtocolsErrors() async throws {
        // The handshake's own bound is not what is tested: a loaded machine once took over
        // its 5 s to start Python and write the oversized line.
        let (garbage, first) = try await check("garbage", timeout: .seconds(60))
        #expect(error(garbage)?.kind == .protocolError)
        #expect(error(garbage)?.detail.contains("\"this is not JSON\"") == true)
        let (huge, second) = try await check("huge", timeout: .seconds(60))
        #expect(error(huge)?.kind == .protocolError)
        #expect(error(huge)?.detail.contains("over 1048576 bytes") == true)
        #expect(first.leftovers().isEmpty && second.leftovers().isEmpty)
    }

    @Test func aManifestThatLiesAboutItsCapabilitiesIsCaught() async throws {
        let (result, _) = try await check("liar")
        let failure = try #require(error(result))
        #expect(failure.kind == .malformedData)
        #expect(failure.detail.contains("it serves camera, the manifest declares gps"), "\(failure)")
    }

    @Test func aPluginsOwnErrorKeepsItsKindAndAdvice() async throws {
        let (result, _) = try await check("refuse")
        let failure = try #require(error(result))
        #expect(failure.kind == .deviceNotFound)
        #expect(failure.detail == "no receiver on /dev/ttyFIXTURE")
        #expect(failure.advice == "plug it in")
    }

    @Test func aPluginThatWillNotExitIsStopped() async throws {
        let start = ContinuousClock.now
        let (result, fixtures) = try await check("linger")
        _ = try result.get()
        #expect(ContinuousClock.now - start < .seconds(8))
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func aCancelledCheckEndsAtOnceAndLeavesNothing() async throws {
        let fixtures = try PluginFixtures()
        let manifest = try PluginManifest.load(try fixtures.plugin("probe", mode: "silent"))
        let waiting = Task { try await PluginCheck.handshake(manifest, timeout: .seconds(60)) }
        try await Task.sleep(for: .milliseconds(500))
        let cancelledAt = ContinuousClock.now
        waiting.cancel()
        await #expect { try await waiting.value } throws: { ($0 as? FieldHALError)?.kind == .cancelled }
        #expect(ContinuousClock.now - cancelledAt < .seconds(20), "ended by the cancel, not at the check's 60 s")
        #expect(fixtures.leftovers().isEmpty)
    }

    @Test func aMissingOrNonExecutableProgramSaysWhatToDo() async throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("probe")
        chmod(fixtures.root + "/probe/run", 0o644)
        await #expect { try await PluginCheck.handshake(try PluginManifest.load(file)) } throws: {
            ($0 as? FieldHALError)?.advice == "chmod +x \(fixtures.root)/probe/run"
        }
        try FileManager.default.removeItem(atPath: fixtures.root + "/probe/run")
        await #expect { try await PluginCheck.handshake(try PluginManifest.load(file)) } throws: {
            ($0 as? FieldHALError)?.detail == "\(fixtures.root)/probe/run is missing"
        }
    }
}

/// Plugins are trusted like code (issue 41): root once ran a world-writable plugin, and
/// followed a symlink into a user's home to run that user's program as uid 0.
@Suite struct PluginTrustTests {
    @Test func aWorldWritableManifestOrFolderIsRefusedSayingWhichAndWhy() throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("open")
        chmod(file, 0o666)
        var found = PluginDirectories.discover(in: [fixtures.root], builtIn: [])
        #expect(found.plugins.isEmpty)
        #expect(found.problems.first?.kind == .permissionDenied && found.problems.first?.subject == file, "\(found.problems)")
        #expect(found.problems.first?.detail.contains("anyone may write it (mode 666)") == true, "\(found.problems)")
        chmod(file, 0o644)
        chmod(fixtures.root + "/open", 0o777)  // the folder above it: anyone could swap the manifest
        found = PluginDirectories.discover(in: [fixtures.root], builtIn: [])
        #expect(found.plugins.isEmpty && found.problems.first?.subject == fixtures.root + "/open", "\(found.problems)")
        chmod(fixtures.root + "/open", 0o755)
        found = PluginDirectories.discover(in: [fixtures.root], builtIn: [])
        #expect(found.plugins.map(\.name) == ["open"] && found.problems.isEmpty, "\(found.problems)")
    }

    @Test func aWorldWritableProgramIsNotRun() async throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("open")
        chmod(fixtures.root + "/open/run", 0o777)
        await #expect { try await PluginCheck.handshake(try PluginManifest.load(file)) } throws: {
            let error = $0 as? FieldHALError
            return error?.kind == .permissionDenied && error?.subject == fixtures.root + "/open/run"
                && error?.advice?.contains("chmod go-w") == true
        }
        #expect(fixtures.leftovers().isEmpty, "nothing was started")
    }

    @Test(.enabled(if: geteuid() == 0, "needs root to make files another user owns"))
    func aSymlinkIntoAnotherUsersFolderIsResolvedAndRefused() async throws {
        let fixtures = try PluginFixtures()
        // The other user's folder, with a plugin of theirs in it, and a link to it from a
        // plugin directory root trusts.
        let home = fixtures.root + "/home-4242"
        let theirs = try fixtures.plugin("theirs", in: home)
        chown(home, 4242, 4242)
        chown(home + "/theirs", 4242, 4242)
        let trusted = fixtures.root + "/trusted"
        try FileManager.default.createDirectory(atPath: trusted, withIntermediateDirectories: true)
        #expect(symlink(home + "/theirs", trusted + "/theirs") == 0)
        let found = PluginDirectories.discover(in: [trusted], builtIn: [])
        #expect(found.plugins.isEmpty, "\(found.plugins.map(\.name))")
        #expect(found.problems.first?.subject == home + "/theirs" && found.problems.first?.detail.contains("owned by uid 4242") == true,
                "\(found.problems)")
        // And a manifest of root's whose program is a link to theirs: not run.
        let mine = try fixtures.plugin("mine", in: trusted)
        try FileManager.default.removeItem(atPath: trusted + "/mine/run")
        #expect(symlink(home + "/theirs/run", trusted + "/mine/run") == 0)
        chown(home + "/theirs/run", 4242, 4242)
        await #expect { try await PluginCheck.handshake(try PluginManifest.load(mine)) } throws: {
            ($0 as? FieldHALError)?.kind == .permissionDenied
        }
        _ = theirs
    }
}

/// `fieldhal plugins` and `fieldhal plugin check`, as a user runs them.
@Suite struct PluginCommandTests {
    @Test func pluginsListsExternalOnesWithTheirOrigin() async throws {
        let fixtures = try PluginFixtures()
        let file = try fixtures.plugin("probe")
        try "{".write(toFile: fixtures.root + "/broken.json", atomically: true, encoding: .utf8)
        let result = try await CLI.run(["plugins", "--json"], environment: ["FIELDHAL_PLUGIN_PATH": fixtures.root])
        #expect(result.status == 0, "\(result.stderr)")
        let listing = try JSONDecoder().decode(JSONValue.self, from: Data(result.stdout.utf8))
        let probe = listing["plugins"]?.array?.first { $0["name"] == .string("probe") }
        #expect(probe?["origin"] == .string(file))
        #expect(probe?["protocol"] == .string("1.0"))
        #expect(probe?["capabilities"] == .array([.string("gps")]))
        #expect(listing["plugins"]?.array?.first { $0["name"] == .string("fake") }?["origin"] == .string("built-in"))
        #expect(listing["searched"]?.array?.first == .string(fixtures.root))
        #expect(listing["problems"]?.array?.first?["file"] == .string(fixtures.root + "/broken.json"))
    }

    @Test func pluginCheckReportsAgreementOrTheFailureWithItsExitStatus() async throws {
        let fixtures = try PluginFixtures()
        try fixtures.plugin("probe")
        let good = try await CLI.run(["plugin", "check", fixtures.root + "/probe"])
        #expect(good.status == 0, "\(good.stderr)")
        #expect(good.stdout.contains("plugin probe 0.3.1 (protocol 1.0)"))
        #expect(good.stdout.contains("provides gps (device: string, required)"))
        #expect(good.stdout.contains("handshake: the plugin agrees with its manifest"))

        try fixtures.plugin("crashing", mode: "crash", manifest: PluginFixtures.manifest(name: "crashing"))
        let crashed = try await CLI.run(["plugin", "check", fixtures.root + "/crashing/plugin.json"])
        #expect(crashed.status == 69)
        #expect(crashed.stderr.contains("fieldhal: plugin crashing: "))

        let absent = try await CLI.run(["plugin", "check", fixtures.root + "/nothing"])
        #expect(absent.status == 66)

        // With --json a failure is one JSON object on standard output as well.
        let goodJSON = try await CLI.run(["plugin", "check", "--json", fixtures.root + "/probe"])
        let passed = try JSONSerialization.jsonObject(with: Data(goodJSON.stdout.utf8)) as? [String: Any]
        #expect(goodJSON.status == 0 && passed?["passed"] as? Bool == true && passed?["name"] as? String == "probe", "\(goodJSON)")
        let crashedJSON = try await CLI.run(["plugin", "check", "--json", fixtures.root + "/crashing"])
        let failed = try JSONSerialization.jsonObject(with: Data(crashedJSON.stdout.utf8)) as? [String: Any]
        let error = failed?["error"] as? [String: Any]
        #expect(crashedJSON.status == 69 && failed?["passed"] as? Bool == false && failed?["exitStatus"] as? Int == 69, "\(crashedJSON)")
        #expect(error?["kind"] as? String == "unavailable" && (error?["detail"] as? String)?.contains("killed by signal 6") == true, "\(crashedJSON)")
        let absentJSON = try await CLI.run(["plugin", "check", "--json", fixtures.root + "/nothing"])
        let missing = try JSONSerialization.jsonObject(with: Data(absentJSON.stdout.utf8)) as? [String: Any]
        #expect(absentJSON.status == 66 && missing?["passed"] as? Bool == false, "\(absentJSON)")
    }

    /// A built-in plugin out of process from the command line: the manifest `plugin
    /// manifest` prints, with `plugin serve` as its executable, passes the check; a plugin
    /// the build does not have is a usage error; garbage from the host, a protocol error.
    @Test func aBuiltInServedOutOfProcessPassesTheCheck() async throws {
        let manifest = try await ExternalBuiltin.install("fake", as: "fake-process")
        let checked = try await CLI.run(["plugin", "check", manifest])
        #expect(checked.status == 0, "\(checked.stdout)\(checked.stderr)")
        #expect(checked.stdout.contains("plugin fake-process"), "\(checked.stdout)")
        let unknown = try await CLI.run(["plugin", "serve", "no-such-plugin"])
        #expect(unknown.status == 64 && unknown.stderr.contains("no built-in plugin no-such-plugin"), "\(unknown.stderr)")
        let garbled = try await CLI.run(["plugin", "serve", "fake"], input: "this is not JSON\n")
        #expect(garbled.status == 76, "\(garbled.stderr)")
        #expect(garbled.stderr.contains("not JSON-RPC 2.0"), "\(garbled.stderr)")
    }

    /// `plugin serve` runs the plugin executable beside the binary (issue 42: a process
    /// without the rest of the CLI): the process that answers the handshake is
    /// `fieldhal-plugin fake`. One that others may change is refused, as a plugin directory's
    /// would be; a binary with none beside it serves the plugin itself.
    @Test func pluginServeRunsThePluginExecutable() async throws {
        let handshake = #"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocol":"1.6"}}"# + "\n"
        let served = try await CLI.run(["plugin", "serve", "fake", "--name", "fake-own"], input: handshake)
        #expect(served.status == 0 && served.stdout.contains(#""name":"fake-own""#), "\(served.stdout)\(served.stderr)")
        let own = URL(fileURLWithPath: CLI.binary.deletingLastPathComponent().appendingPathComponent("fieldhal-plugin").path)
        let help = try await offPool { try CLI.runBlocking(["fake", "--help"], executable: own) }
        #expect(help.status == 0 && help.stdout.contains("usage: fieldhal-plugin fake [--name NAME]"), "\(help.stdout)")
        let none = try await offPool { try CLI.runBlocking(["no-such-plugin"], executable: own) }
        #expect(none.status == 64 && none.stderr.contains("no built-in plugin no-such-plugin"), "\(none.stderr)")
        let watched = try await offPool { () throws -> String? in
            let process = Process()
            process.executableURL = CLI.binary
            process.arguments = ["plugin", "serve", "fake"]
            let input = Pipe()
            process.standardInput = input
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            defer { try? input.fileHandleForWriting.close(); process.waitUntilExit() }
            // exec(2) keeps the pid: wait for the image to be the plugin executable's.
            for _ in 0..<200 {
                if let image = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.processIdentifier)/exe"),
                   image.hasSuffix("/fieldhal-plugin") { return image }
                usleep(50_000)
            }
            return try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(process.processIdentifier)/exe")
        }
        #expect(watched?.hasSuffix("/fieldhal-plugin") == true, "\(watched ?? "no process")")

        // A copy of the CLI (a hard link: the same file) in a folder of its own, beside a
        // plugin executable anyone may write.
        let folder = CLI.binary.deletingLastPathComponent().appendingPathComponent("serve-test-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let linked = folder + "/fieldhal"
        try FileManager.default.linkItem(atPath: CLI.binary.resolvingSymlinksInPath().path, toPath: linked)
        let alone = try await offPool { try CLI.runBlocking(["plugin", "serve", "fake"], input: handshake, executable: URL(fileURLWithPath: linked)) }
        #expect(alone.status == 0 && alone.stdout.contains(#""name":"fake-process""#), "served by the CLI itself: \(alone.stdout)\(alone.stderr)")
        let writable = folder + "/fieldhal-plugin"
        try "#!/bin/sh\necho replaced\n".write(toFile: writable, atomically: false, encoding: .utf8)
        chmod(writable, 0o757)
        let refused = try await offPool { try CLI.runBlocking(["plugin", "serve", "fake"], input: handshake, executable: URL(fileURLWithPath: linked)) }
        #expect(refused.status == 77 && refused.stderr.contains("fieldhal-plugin") && !refused.stdout.contains("replaced"),
                "\(refused.status) \(refused.stdout)\(refused.stderr)")
    }

    @Test func manifestOutputInstallsAPluginOrSaysWhyNot() async throws {
        let fixtures = try PluginFixtures()
        let folder = fixtures.root + "/fake-process"
        let installed = try await CLI.run(["plugin", "manifest", "fake", "--output", folder])
        #expect(installed.status == 0, "\(installed.stderr)")
        #expect(installed.stdout.contains("plugin = \"fake-process\""), "\(installed.stdout)")
        let run = try String(contentsOfFile: folder + "/run", encoding: .utf8)
        #expect(run.hasPrefix("#!/bin/sh\n") && run.contains("plugin serve fake --name fake-process"), "\(run)")
        #expect(FileManager.default.isExecutableFile(atPath: folder + "/run"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder).sorted() == ["plugin.json", "run"], "nothing staged is left")
        let manifest = try PluginManifest.load(folder + "/plugin.json")
        #expect(manifest.name == "fake-process" && manifest.parameterSpecs.keys.contains(.nfcReader), "\(manifest.parameterSpecs.keys)")
        // Once more over it: the same two files.
        #expect(try await CLI.run(["plugin", "manifest", "fake", "--output", folder]).status == 0)
        // Under a umask of 000 the folder and files are still 0755 and 0644: FieldHAL would
        // refuse to run a plugin others can write.
        let loose = fixtures.root + "/loose"
        let umasked = try await CLI.runTool("/bin/sh", ["-c", "umask 000 && exec \"$0\" plugin manifest fake --output \"$1\"", CLI.binary.path, loose])
        #expect(umasked.status == 0, "\(umasked.stderr)")
        let modes = try ["", "/plugin.json", "/run"].map { (try FileManager.default.attributesOfItem(atPath: loose + $0)[.posixPermissions] as? Int) ?? -1 }
        #expect(modes == [0o755, 0o644, 0o755], "\(modes.map { String($0, radix: 8) })")
        #expect(PluginDirectories.discover(in: [fixtures.root], builtIn: []).problems.isEmpty)

        let blocked = fixtures.root + "/a-file"
        try "x".write(toFile: blocked, atomically: true, encoding: .utf8)
        let refused = try await CLI.run(["plugin", "manifest", "fake", "--output", blocked + "/inside"])
        #expect(refused.status == 73 && refused.stderr.contains("cannot write the plugin into"), "\(refused.status) \(refused.stderr)")
        let escaping = try await CLI.run(["plugin", "manifest", "fake", "--executable", "../run", "--output", folder])
        #expect(escaping.status == 64, "\(escaping.stderr)")
    }

    /// docs/plugins.md's manifest and smallest plugin, taken from the page as written.
    @Test func theDocumentedPluginPassesItsCheck() async throws {
        let page = try String(contentsOf: CLI.repositoryRoot.appendingPathComponent("docs/plugins.md"), encoding: .utf8)
        func firstBlock(_ language: String) throws -> String {
            let start = try #require(page.range(of: "```\(language)\n"))
            let end = try #require(page.range(of: "```", range: start.upperBound..<page.endIndex))
            return String(page[start.upperBound..<end.lowerBound])
        }
        let fixtures = try PluginFixtures()
        let folder = fixtures.root + "/nmea-serial"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try firstBlock("json").write(toFile: folder + "/plugin.json", atomically: true, encoding: .utf8)
        try ExecutableFile.write(firstBlock("python"), to: folder + "/nmea-serial.py")
        let result = try await CLI.run(["plugin", "check", "--json", folder])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try JSONDecoder().decode(JSONValue.self, from: Data(result.stdout.utf8))
        #expect(report["name"] == .string("nmea-serial"))
        #expect(report["capabilities"]?["gps"] == .array([.string("device"), .string("baud")]))
        #expect(fixtures.leftovers().isEmpty)
    }
}
