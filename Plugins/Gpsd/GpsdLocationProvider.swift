#if GPS
import FieldHAL
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Location from gpsd. A session runs on the plugin's own thread from `open` to `close`:
/// it holds the libgps connection, waits in `poll` on the socket and a wake-up pipe, hands
/// every fix to the current watchers, and when gpsd goes away reports a no-fix with the
/// reason and reconnects with backoff until gpsd is back.
final class GpsdLocationProvider: LocationProvider {
    struct Settings: Sendable {
        var host = "localhost"
        var port = 2947
        /// Watch only this receiver (gpsd's device path); nil watches all.
        var device: String?
        /// No report for this long counts as a lost source.
        var silenceTimeout: Duration = .seconds(2)
        /// The longest wait between reconnection attempts.
        var reconnectCeiling: Duration = .seconds(10)
        /// The first wait between attempts; it doubles up to the ceiling.
        var reconnectFloor: Duration = .milliseconds(250)
    }

    let deviceName: String
    /// Where the receiver is: gpsd's endpoint and the receiver's path there (udev's stable
    /// link to it when there is one). gpsd names its driver only in reports a watch has
    /// already begun with, so vendor and model are not said here.
    let identity: DeviceIdentity?
    private let settings: Settings
    private let thread: DeviceThread
    private let wakeup: WakeupEvent
    private let broadcaster = Broadcaster<Fix>()
    private let latestPositioned = LockedValue<ReceivedFix?>(nil)
    private let stopping = LockedValue(false)

    /// Connects once, so that a wrong host or a stopped gpsd fails `open` with a clear
    /// error, then starts the session with that connection.
    static func open(_ settings: Settings) async throws -> GpsdLocationProvider {
        let thread = DeviceThread(name: "fieldhal-gpsd")
        do {
            let first = try await thread.run {
                UncheckedBox(try GpsdConnection(host: settings.host, port: settings.port, device: settings.device))
            }
            let provider = try GpsdLocationProvider(settings: settings, thread: thread)
            provider.startSession(with: first)
            return provider
        } catch {
            thread.stop()
            throw error
        }
    }

    private init(settings: Settings, thread: DeviceThread) throws {
        self.settings = settings
        self.thread = thread
        self.wakeup = try WakeupEvent()
        var name = "gpsd \(settings.host):\(settings.port)"
        if let device = settings.device { name += " \(device)" }
        deviceName = name
        let path = settings.device.map { DeviceIdentity.stableLink(for: $0, in: ["/dev/serial/by-id", "/dev/serial/by-path"]) ?? $0 }
        identity = DeviceIdentity(link: "gpsd://\(settings.host):\(settings.port)" + (path ?? ""))
    }

    func watch() -> AsyncThrowingStream<Fix, any Error> {
        broadcaster.subscribe()
    }

    /// Fixes handed over on the session's thread as each report is parsed.
    func follow(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription {
        broadcaster.subscribe(handler, end: end)
    }

    func lastKnownFix() async -> ReceivedFix? {
        latestPositioned.value
    }

    func close() async {
        guard !stopping.withLock({ state -> Bool in defer { state = true }; return state }) else { return }
        wakeup.signal()
        // Queued behind the session, this returns once the session has closed its socket.
        _ = try? await thread.run {}
        thread.stop()
        broadcaster.finish()
    }

    // MARK: - The session, on the device thread

    private func startSession(with first: UncheckedBox<GpsdConnection>) {
        thread.submit { [self] in
            runSession(startingWith: first.value)
        }
    }

    private func runSession(startingWith first: GpsdConnection) {
        var connection: GpsdConnection? = first
        var backoff = settings.reconnectFloor
        var reportedProblem: String?

        /// Reports a lost source once per distinct problem, not on every retry.
        func report(problem: String) {
            guard problem != reportedProblem else { return }
            reportedProblem = problem
            broadcaster.yield(.lost(problem))
        }

        while !stopping.value {
            if connection == nil {
                do {
                    connection = try GpsdConnection(host: settings.host, port: settings.port, device: settings.device)
                    backoff = settings.reconnectFloor
                } catch {
                    report(problem: "\(Self.reason(error)); retrying")
                    if waitForWakeup(upTo: backoff) { continue }  // woken: closing
                    backoff = min(backoff * 2, settings.reconnectCeiling)
                    continue
                }
            }
            guard let live = connection else { continue }
            do {
                try pump(live, reportProblem: report, clearProblem: { reportedProblem = nil })
            } catch {
                report(problem: "\(Self.reason(error)); reconnecting")
            }
            live.close()
            connection = nil
        }
        connection?.close()
    }

    /// Reads reports from one connection until it fails (throws) or the provider closes.
    private func pump(_ connection: GpsdConnection, reportProblem: (String) -> Void, clearProblem: () -> Void) throws {
        var lastReport = ContinuousClock.now
        var silent = false
        let silence = settings.silenceTimeout
        while !stopping.value {
            var entries = [
                pollfd(fd: connection.fileDescriptor, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0),
            ]
            let timeout = silent ? silence : max(.zero, silence - (ContinuousClock.now - lastReport))
            try SystemCall.poll(&entries, timeout: timeout, subject: "gps \(deviceName)")
            if entries[1].revents != 0 { wakeup.drain(); continue }
            if entries[0].revents != 0 {
                for report in try connection.readReports() {
                    switch report {
                    case .fix(let fix):
                        lastReport = .now
                        clearProblem()
                        silent = false
                        if fix.hasPosition { latestPositioned.withLock { $0 = ReceivedFix(fix: fix) } }
                        broadcaster.yield(fix)
                    case .receiverGone(let path):
                        silent = true  // the silence that follows has this cause
                        reportProblem("gpsd reports the receiver \(path.isEmpty ? "" : path + " ")is gone")
                    }
                }
            } else if ContinuousClock.now - lastReport >= settings.silenceTimeout, !silent {
                silent = true
                reportProblem("no report from gpsd for \(settings.silenceTimeout.secondsDescription)")
            }
        }
    }

    /// What a watcher is told: a FieldHALError's detail (its subject is this device already).
    private static func reason(_ error: any Error) -> String {
        (error as? FieldHALError)?.detail ?? "\(error)"
    }

    /// Sleeps up to `duration` unless woken; returns true when woken (the provider closing).
    private func waitForWakeup(upTo duration: Duration) -> Bool {
        guard wakeup.wait(upTo: duration) else { return false }
        wakeup.drain()
        return true
    }
}

/// Carries a value that is used by one thread at a time across the hand-over from the
/// opening job to the session job (both on the same device thread).
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
#endif
