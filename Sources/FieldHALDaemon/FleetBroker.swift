import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import FieldHALComposition
import FieldHALMQTT
import FieldHALServer
import FieldHALSystem
import Foundation

extension Daemon {
    /// `[mqtt]`: the kit on the fleet's broker (`FleetBridge`), when configured. What it
    /// publishes comes from what the daemon holds for everyone: each device's state as it
    /// changes, the health, and the receivers' fixes from the shared watch, followed from the
    /// start (so a flow that watches the receiver later adds nothing the broker could see).
    ///
    /// A reload that changes `[mqtt]` stops the bridge and starts one with the new settings
    /// (what waits on disk carries over; one that removes `[mqtt]` leaves the broker).
    func bridgeToBroker(_ host: APIHost) async {
        host.metrics.read { [fleetBridge] in fleetBridge.value.map { Self.readings($0.figures) } ?? [] }
        var settings = broker
        while !Task.isCancelled {
            let reloaded = reloads.subscribe()  // before the bridge starts: no reload is missed
            let running = settings
            enum Ended { case bridge, reloaded, stopped }
            let changed = await withTaskGroup(of: Ended.self) { group -> Bool in
                if let running { group.addTask { await self.runBridge(running, host); return .bridge } }
                group.addTask {
                    do {
                        for try await _ in reloaded where self.brokerSettingsNow(keeping: running) != running { return .reloaded }
                    } catch {}
                    return .stopped
                }
                // A bridge that could not start waits for a reload that mends [mqtt].
                while let ended = await group.next() {
                    guard ended == .bridge else {
                        group.cancelAll()
                        return ended == .reloaded
                    }
                }
                return false
            }
            guard changed, !Task.isCancelled else { return }
            settings = brokerSettingsNow(keeping: settings)
            logger.info(settings == nil ? "mqtt: [mqtt] is gone from the configuration; the kit left the broker"
                                        : "mqtt: [mqtt] changed; the bridge starts again with it")
        }
    }

    /// `[mqtt]` as the configuration says it now; a section that no longer parses keeps
    /// `old` (a reload checks it first, so this is a file changed under the daemon).
    private func brokerSettingsNow(keeping old: MQTTSettings?) -> MQTTSettings? {
        let configuration = current.configuration
        do {
            return try MQTTSettings(settings: configuration.settings["mqtt"], file: configuration.file)
        } catch {
            logger.error("mqtt: \(error.description) — the bridge keeps its settings")
            return old
        }
    }

    private static func readings(_ figures: FleetBridge.Figures) -> [KitMetrics.Reading] {
        [
            .init("fieldhal_mqtt_connected", help: "1 while the kit is connected to its MQTT broker", value: figures.connected ? 1 : 0),
            .init("fieldhal_mqtt_connections_total", help: "connections made to the MQTT broker (each reconnection after an outage adds one)",
                  type: "counter", value: Double(figures.connections)),
            .init("fieldhal_mqtt_queued_messages", help: "messages kept on disk for the broker, waiting or not yet acknowledged", value: Double(figures.queued)),
            .init("fieldhal_mqtt_delivered_total", help: "queued messages (device events, fixes) the broker acknowledged", type: "counter",
                  value: Double(figures.delivered)),
            .init("fieldhal_mqtt_dropped_total", help: "queued messages dropped because the queue was full", type: "counter", value: Double(figures.dropped)),
            .init("fieldhal_mqtt_commands_total", help: "commands taken from the command topic", type: "counter", value: Double(figures.commands)),
            .init("fieldhal_mqtt_commands_dropped_total", help: "commands dropped unread: too long, or too many waiting", type: "counter",
                  value: Double(figures.commandsDropped)),
        ]
    }

    /// One bridge with `settings`, until cancelled.
    private func runBridge(_ settings: MQTTSettings, _ host: APIHost) async {
        let bridge: FleetBridge
        do {
            bridge = try FleetBridge(settings: settings, spoolDirectory: current.stateDirectory.file("mqtt-queue"),
                                     version: FieldHALVersion.current, logger: logger)
        } catch {
            logger.error("mqtt: \(CommandFailure(error).description) — the kit is not on the broker until [mqtt] is mended and the daemon reloaded")
            return
        }
        fleetBridge.withLock { $0 = bridge }
        let changes = host.capabilityEvents()  // before the look: no change is missed
        let reloaded = host.reloads()
        let sightings = settings.tags ? host.sightings() : nil
        for status in host.devices { bridge.device(status, changed: false) }
        bridge.health(host.health)
        // Every receiver as it is there: at the start, and one that comes later (plugged in,
        // or added by a reload).
        let follows = LockedValue<[String: Subscription]>([:])
        @Sendable func follow(_ status: CapabilityStatus) {
            guard settings.fixInterval != nil, status.capability == .location, status.state == .available else { return }
            let name = status.name ?? KitConfiguration.defaultDeviceName
            guard follows.withLock({ $0[name] == nil }), let watch = try? host.location(named: name).watch else { return }
            let subscription = watch.follow { fix in bridge.fix(fix, device: name) }
            if let extra = follows.withLock({ held -> Subscription? in
                if held[name] == nil { held[name] = subscription; return nil }
                return subscription
            }) { extra.cancel() }
        }
        for status in host.devices { follow(status) }
        defer { for subscription in follows.withLock({ Array($0.values) }) { subscription.cancel() } }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    try await bridge.run()
                } catch {
                    self.logger.error("mqtt: \(CommandFailure(error).description) — the kit is not on the broker until the daemon restarts")
                }
            }
            if !settings.commands.isEmpty {
                let door = APIMessageDoor(api: APIServer(socketPath: current.apiSocketPath, host: host,
                                                         scratchBase: PrivateScratch.base(stateDirectory: current.stateDirectory.path)),
                                          scopes: settings.commands, place: settings.place)
                group.addTask { await Self.answerCommands(bridge, door) }
            }
            if let sightings {
                group.addTask {
                    do {
                        for try await sighting in sightings {
                            guard let payload = try? FieldHALAPI.encoder.encode(MQTTTagEvent(sighting)) else { continue }
                            bridge.tag(Array(payload))
                        }
                    } catch {}
                }
            }
            group.addTask {
                do {
                    for try await status in changes {
                        bridge.device(status, changed: true)
                        bridge.health(host.health)
                        follow(status)
                    }
                } catch {}
            }
            // A reload may add devices without a change to say of them: each one's state,
            // and a receiver followed, once the reload has opened them.
            group.addTask {
                do {
                    for try await _ in reloaded {
                        for status in host.devices {
                            bridge.device(status, changed: false)
                            follow(status)
                        }
                        bridge.health(host.health)
                    }
                } catch {}
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// Commands answered as they come, at most `concurrent` at once: a command that waits
    /// for a tag does not hold a status behind it, and a flood waits in the bridge's bounded
    /// queue rather than in tasks here.
    static func answerCommands(_ bridge: FleetBridge, _ door: APIMessageDoor, concurrent: Int = 4) async {
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for await payload in bridge.commands {
                if running == concurrent {
                    await group.next()
                    running -= 1
                }
                running += 1
                group.addTask {
                    switch MQTTCommand.parse(payload) {
                    case .failure(let refusal):
                        bridge.answer(refusal.payload)
                    case .success(let command):
                        let answer = await door.answer(method: command.method, target: command.path, body: command.body)
                        bridge.answer(MQTTAnswer(id: command.id, status: answer.status, body: answer.body).payload)
                    }
                }
            }
        }
    }
}

/// `<prefix>/events/tag` (docs/fleet.md): a tag a client read, or one found or lost while
/// clients follow tag events, as the API describes a tag.
struct MQTTTagEvent: Encodable {
    var event: String
    var device: String
    var tag: APITag
    var at: Date

    init(_ sighting: TagSighting, at: Date = Date()) {
        event = sighting.event.rawValue
        device = sighting.device
        tag = APITag(sighting.tag)
        self.at = at
    }
}
