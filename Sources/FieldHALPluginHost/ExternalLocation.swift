import FieldHAL
import FieldHALPluginProtocol
import Foundation
import Logging

/// Location from an external plugin: the plugin's `gps.watch` stream, shared by every
/// watcher, and the plugin restarted with backoff when it fails.
///
/// While the plugin is down, watchers hear a no-fix report naming the plugin and why (its
/// exit, its hang, its garbage, with the tail of its stderr), as from any lost source; no
/// stream ends. The first start must succeed, so a kit whose plugin cannot start reports
/// the capability unavailable with that reason.
///
/// A plugin of 1.6 or later serves its receivers in the process it shares with its other
/// devices (`RequestLink.Hold.watch`); an older one runs a process of its own per receiver
/// (`Link`).
final class ExternalLocation: LocationProvider, SupervisedDevice {
    let deviceName: String
    private let feed: FixFeed
    private let source: Source

    private enum Source {
        case own(Link)
        case shared(RequestLink.Hold)
    }

    /// A receiver's fixes as its plugin's notifications give them, shared by every watcher.
    final class FixFeed: StreamFeed {
        let plugin: String
        let fixes = Broadcaster<Fix>(bufferLimit: 8)
        let last = LockedValue<ReceivedFix?>(nil)

        init(plugin: String) { self.plugin = plugin }

        func notified(_ method: String, _ parameters: JSONValue) {
            switch method {
            case "gps.fix":
                do {
                    let fix = try PluginProtocol.fix(from: parameters["fix"] ?? .null, plugin: plugin)
                    if fix.hasPosition { last.withLock { $0 = ReceivedFix(fix: fix) } }
                    fixes.yield(fix)
                } catch {
                    fixes.yield(.lost("\(error)"))
                }
            case "gps.lost":
                fixes.yield(.lost("plugin \(plugin): " + (parameters["reason"]?.string ?? "the receiver is lost")))
            default:
                break
            }
        }

        func failed(_ error: FieldHALError) { fixes.yield(.lost("\(error)")) }

        func finish() { fixes.finish() }
    }

    /// A receiver in a process of its own (a plugin of 1.5 or older): the session, its
    /// stream and the supervision state.
    final class Link: Sendable {
        let manifest: PluginManifest
        let parameters: JSONValue
        /// Where the supervision is said: a plugin's failures and restarts (the daemon's
        /// journal). Watchers hear them too, as lost fixes, but only while they watch.
        let logger: Logger
        let feed: FixFeed
        /// Why the process is down while it is (`SupervisedDevice`).
        let health = PluginHealth()
        let session = LockedValue<PluginSession?>(nil)
        let stream = LockedValue<Int64?>(nil)
        let restarting = LockedValue<Task<Void, Never>?>(nil)
        let closed = LockedValue(false)
        /// Each session started gets a number; only the end of the one that is serving
        /// (`established`) starts a restart. A session that fails while `connect()` is
        /// still setting it up is that call's error, handled there: letting it restart too
        /// would start a second restart loop beside the first, and so on.
        let generation = LockedValue(0)
        let established = LockedValue<Int?>(nil)
        /// What the plugin's `open` said of the receiver.
        let identity = LockedValue<DeviceIdentity?>(nil)

        init(manifest: PluginManifest, parameters: JSONValue, logger: Logger) {
            self.manifest = manifest
            self.parameters = parameters
            self.logger = logger
            self.feed = FixFeed(plugin: manifest.name)
        }

        /// Starts a session, opens the receiver and starts its fix stream. Returns the
        /// device's name as the plugin gives it.
        func connect() async throws -> String {
            let number = generation.withLock { $0 += 1; return $0 }
            let session = try await PluginSession.start(manifest, onNotification: { [weak self] method, parameters in
                self?.received(method, parameters)
            }, onEnd: { [weak self] error in
                self?.ended(error, session: number)
            })
            do {
                let opened = try await session.call("open", .object(["capability": .string(Capability.location.rawValue),
                                                                     "parameters": parameters]),
                                                    timeout: .seconds(10))
                let device = opened["device"]?.string ?? manifest.name
                let said = try PluginProtocol.identity(from: opened["identity"], plugin: manifest.name)
                identity.withLock { $0 = said }
                let watch = try await session.call("gps.watch", .object([:]), timeout: .seconds(5))
                guard let stream = watch["stream"]?.integer else {
                    throw FieldHALError(.protocolError, subject: "plugin \(manifest.name)",
                                        detail: "its gps.watch answer has no \"stream\" number", advice: "docs/plugin-protocol.md")
                }
                self.stream.withLock { $0 = stream }
                self.session.withLock { $0 = session }
                established.withLock { $0 = number }
                // Ended while this was being set up: its end went unheard; say it now.
                if let ending = session.ended { ended(ending, session: number) }
                if closed.value { await session.stop() }
                return device
            } catch {
                await session.stop()
                throw error
            }
        }

        private func received(_ method: String, _ parameters: JSONValue) {
            guard let stream = parameters["stream"]?.integer, stream == self.stream.value else { return }
            feed.notified(method, parameters)
        }

        /// The plugin failed: say so to the watchers, and start it again (0.5 s, doubling to
        /// 30 s between attempts), until it serves again or the device is closed.
        private func ended(_ error: FieldHALError, session number: Int) {
            let current = established.withLock { established -> Bool in
                guard established == number else { return false }
                established = nil
                return true
            }
            guard current else { return }
            session.withLock { $0 = nil }
            stream.withLock { $0 = nil }
            guard !closed.value else { return }
            feed.failed(error)
            var delay = Duration.milliseconds(500)
            logger.error("\(error) — starting it again in \(delay.secondsDescription)")
            health.say("\(error) — starting it again in \(delay.secondsDescription)")
            let task = Task { [self] in
                var attempts = 0
                while !Task.isCancelled, !closed.value {
                    try? await Task.sleep(for: delay)
                    guard !Task.isCancelled, !closed.value else { return }
                    attempts += 1
                    do {
                        _ = try await connect()
                        logger.notice("plugin \(manifest.name) serves \(Capability.location) again (\(attempts == 1 ? "restarted" : "after \(attempts) attempts"))")
                        health.say(nil)
                        return
                    } catch {
                        guard !closed.value else { return }  // the cancelled start of a closed device
                        feed.failed((error as? FieldHALError) ?? FieldHALError(.unavailable, subject: "plugin \(manifest.name)", detail: "\(error)"))
                        delay = min(delay * 2, .seconds(30))
                        logger.warning("\(error) — restart \(attempts) failed; the next in \(delay.secondsDescription)")
                        health.say("\(error) — restart \(attempts) failed; the next in \(delay.secondsDescription)")
                    }
                }
            }
            restarting.withLock { $0 = task }
        }

        func followHealth(_ handler: @escaping @Sendable (String?) -> Void) -> Subscription { health.follow(handler) }

        func close() async {
            closed.withLock { $0 = true }
            restarting.value?.cancel()
            await restarting.value?.value
            await session.value?.stop()
            feed.finish()
        }
    }

    private init(deviceName: String, feed: FixFeed, source: Source) {
        self.deviceName = deviceName
        self.feed = feed
        self.source = source
    }

    /// The receiver a `gps` section names, in the plugin's shared process (1.6) or in one of
    /// its own.
    static func open(_ manifest: PluginManifest, _ parameters: PluginParameters, in links: RequestLinks,
                     logger: Logger) async throws -> ExternalLocation {
        guard RequestLink.namesDevices(manifest) else {
            let link = Link(manifest: manifest, parameters: JSONValue(parameters.values), logger: logger)
            let device = try await link.connect()
            return ExternalLocation(deviceName: "\(device) (plugin \(manifest.name))", feed: link.feed, source: .own(link))
        }
        let (hold, device) = try await RequestLink.started(manifest, .location, parameters, in: links, logger: logger)
        do {
            let feed = try await hold.watch("gps.watch") { FixFeed(plugin: manifest.name) }
            return ExternalLocation(deviceName: device, feed: feed, source: .shared(hold))
        } catch {
            await hold.release()
            throw error
        }
    }

    func watch() -> AsyncThrowingStream<Fix, any Error> { feed.fixes.subscribe() }

    /// Fixes handed over on the session's thread as each notification is read.
    func follow(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription {
        feed.fixes.subscribe(handler, end: end)
    }

    func lastKnownFix() async -> ReceivedFix? { feed.last.value }

    var identity: DeviceIdentity? {
        switch source {
        case .own(let link): link.identity.value
        case .shared(let hold): hold.identity
        }
    }

    func followHealth(_ handler: @escaping @Sendable (String?) -> Void) -> Subscription {
        switch source {
        case .own(let link): link.followHealth(handler)
        case .shared(let hold): hold.followHealth(handler)
        }
    }

    func close() async {
        switch source {
        case .own(let link): await link.close()
        case .shared(let hold): await hold.release()
        }
    }
}

extension PluginManifest {
    /// The plugin as the registry holds it: the configuration is checked against the
    /// manifest's parameters, and opening a capability starts the plugin. Its failures and
    /// restarts go to `logger`.
    public func descriptor(logger: Logger = Logger(label: "fieldhal.plugins")) -> PluginDescriptor {
        let manifest = self
        let links = RequestLinks.shared(for: manifest)
        return PluginDescriptor(name: name, summary: summary, capabilities: parameterSpecs) { capability, parameters, _ in
            switch capability {
            case .location:
                return .location(try await ExternalLocation.open(manifest, parameters, in: links, logger: logger))
            case .nfcReader:
                return .nfcReader(try await ExternalNFCReader.open(manifest, parameters, in: links, logger: logger))
            case .nfcEmulator:
                return .nfcEmulator(try await ExternalTagEmulator.open(manifest, parameters, in: links, logger: logger))
            case .haptics:
                return .haptics(try await ExternalHaptics.open(manifest, parameters, in: links, logger: logger))
            case .biometrics:
                return .biometrics(try await ExternalBiometrics.open(manifest, parameters, in: links, logger: logger))
            case .camera, .microphone, .speaker:
                // Their bytes travel as descriptors beside the messages: protocol 1.3.
                guard manifest.protocolVersion >= PluginProtocol.Version(major: 1, minor: 3) else {
                    throw FieldHALError(.unsupported, subject: "\(capability) plugin \(manifest.name)",
                                        detail: "\(capability) through the plugin protocol needs protocol 1.3; the plugin speaks \(manifest.protocolVersion)",
                                        advice: "update the plugin, or use a built-in plugin for \(capability) (fieldhal plugins lists them)")
                }
                switch capability {
                case .camera: return .camera(try await ExternalCamera.open(manifest, parameters, in: links, logger: logger))
                case .microphone: return .microphone(try await ExternalMicrophone.open(manifest, parameters, in: links, logger: logger))
                default: return .speaker(try await ExternalSpeaker.open(manifest, parameters, in: links, logger: logger))
                }
            }
        }
    }
}

extension PluginRegistry {
    /// The built-in plugins and the external ones the plugin directories hold (the first of
    /// a name; never one named like a built-in), and what the search found wrong. External
    /// plugins' failures and restarts go to `logger` (the process's logging system's, made
    /// now: the daemon sets its journal up before).
    public static func adding(externalPluginsTo builtIn: PluginRegistry, directories: [String] = PluginDirectories.searched(),
                              logger: Logger = Logger(label: "fieldhal.plugins")) -> (PluginRegistry, PluginDirectories.Discovery) {
        let discovery = PluginDirectories.discover(in: directories, builtIn: Set(builtIn.all.map(\.name)))
        return (PluginRegistry(builtIn.all + discovery.plugins.map { $0.descriptor(logger: logger) }), discovery)
    }
}
