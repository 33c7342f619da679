import FieldHAL
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
            ]
        }
        let changes = host.capabilityEvents()  // before the look: no change is missed
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
}
