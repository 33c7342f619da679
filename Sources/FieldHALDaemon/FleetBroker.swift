import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import FieldHALComposition
import FieldHALMQTT
import FieldHALServer
import Foundation

extension Daemon {
    /// `[mqtt]`: the kit on the fleet's broker (`FleetBridge`), when configured. What it
    /// publishes comes from what the daemon holds for everyone: each device's state as it
    /// changes, the health, and the receivers' fixes from the shared watch, followed from the
    /// start (so a flow that watches the receiver later adds nothing the broker could see).
    func bridgeToBroker(_ host: APIHost) async {
        guard let settings = broker else { return }
        let bridge: FleetBridge
        do {
            bridge = try FleetBridge(settings: settings, spoolDirectory: current.stateDirectory.file("mqtt-queue"),
                                     version: FieldHALVersion.current, logger: logger)
        } catch {
            logger.error("mqtt: \(CommandFailure(error).description) — the kit is not on the broker until the daemon restarts")
            return
        }
        fleetBridge.withLock { $0 = bridge }
        host.metrics.read {
            let figures = bridge.figures
            return [
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
        let changes = host.capabilityEvents()  // before the look: no change is missed
        let sightings = settings.tags ? host.sightings() : nil
        for status in host.devices { bridge.device(status, changed: false) }
        bridge.health(host.health)
        var follows: [Subscription] = []
        if settings.fixInterval != nil {
            for status in host.devices where status.capability == .location && status.state != .notConfigured {
                let name = status.name ?? "default"
                guard let watch = try? host.location(named: name).watch else { continue }
                follows.append(watch.follow { fix in bridge.fix(fix, device: name) })
            }
        }
        defer { for follow in follows { follow.cancel() } }
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
