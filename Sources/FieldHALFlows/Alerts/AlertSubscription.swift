import FieldHAL
import Foundation
import Transrify
import TransrifyAlertChannel

/// Nearby alerts while signed in (Req 25, 35): over the WebSocket channel when one is
/// configured, by polling `/v1/alerts/nearby` when not — and whenever the channel is down,
/// until it comes back. Every alert, however it came, goes through the watcher's debounce.
public struct AlertSubscription: Sendable {
    public enum Transport: String, Sendable { case webSocket = "WebSocket", polling }

    public enum Event: Sendable {
        /// A new alert (or one out of its debounce window): banner, haptic, sound.
        case announce(AlertBanner)
        /// The channel opened (`webSocket`), or polling took over (`polling`) and why.
        case transport(Transport, reason: String?)
        /// A poll failed; the next one is on schedule.
        case problem(String)
    }

    public let watcher: AlertWatcher
    public let channel: AlertChannel?
    /// Waits between failed attempts at the channel, the last one repeated.
    public var reconnectDelays: [Duration] = [.seconds(1), .seconds(2), .seconds(5), .seconds(10), .seconds(30)]
    let here: @Sendable () async -> Geolocation?

    /// The kit's own alerts are the watcher's to leave out (`AlertWatcher.own`): nothing that
    /// happens after sign-in (the alert id arriving) restarts a subscription.
    public init(watcher: AlertWatcher, channel: AlertChannel?, here: @escaping @Sendable () async -> Geolocation?) {
        self.watcher = watcher
        self.channel = channel
        self.here = here
    }

    /// Runs until cancelled (sign-out, shutdown), reporting through `emit`, one event at a time.
    public func run(_ emit: @escaping @Sendable (Event) async -> Void) async {
        let channelOpen = LockedValue(false)
        // Ticks ask for a poll: the timer's, and one when the channel goes down so that the
        // gap is covered at once. Coalesced: at most one waits.
        let (ticks, tick) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        if channel == nil { await emit(.transport(.polling, reason: nil)) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [interval = watcher.settings.pollInterval] in
                while !Task.isCancelled {
                    tick.yield()
                    try? await Task.sleep(for: interval)
                }
                tick.finish()
            }
            group.addTask {
                // Req 35.3: no polling while the channel is open.
                for await _ in ticks where !channelOpen.value {
                    do {
                        let poll = try await watcher.poll(here: await here())
                        for banner in poll.announce { await emit(.announce(banner)) }
                    } catch is CancellationError {
                        // Signed out or stopping: the subscription ends; nothing went wrong.
                    } catch where Task.isCancelled {
                    } catch {
                        await emit(.problem((error as? TransrifyError)?.userMessage ?? String(describing: error)))
                    }
                }
            }
            if let channel {
                group.addTask { await keepOpen(channel, open: channelOpen, pollNow: { tick.yield() }, emit) }
            }
        }
    }

    /// Connects, listens, and on any failure reports the fallback once and tries again
    /// after a growing pause.
    private func keepOpen(_ channel: AlertChannel, open: LockedValue<Bool>, pollNow: @escaping @Sendable () -> Void,
                          _ emit: @escaping @Sendable (Event) async -> Void) async {
        var failures = 0
        var fallbackReported = false
        while !Task.isCancelled {
            let opened = LockedValue(false)
            var reason = "closed by the server"
            do {
                try await channel.listen {
                    opened.withLock { $0 = true }
                    open.withLock { $0 = true }
                    await emit(.transport(.webSocket, reason: nil))
                } onAlerts: { message in
                    let considered = watcher.consider(message.alerts, here: await here())
                    for banner in considered.announce { await emit(.announce(banner)) }
                }
            } catch {
                reason = String(describing: error)
            }
            open.withLock { $0 = false }
            if Task.isCancelled { return }
            pollNow()
            if opened.value { failures = 0; fallbackReported = false } else { failures += 1 }
            if !fallbackReported {
                await emit(.transport(.polling, reason: reason))
                fallbackReported = true
            }
            try? await Task.sleep(for: reconnectDelays[min(failures, reconnectDelays.count - 1)])
        }
    }
}
