import ArgumentParser
import FieldHAL
import FieldHALCommandLine
import FieldHALComposition
import FieldHALFlows
import FieldHALSystem
import Foundation
import Transrify
import TransrifyAlertChannel

/// `fieldhal-bench alerts`: how long from a duress alert leaving kit A to the banner on kit
/// B, over the WebSocket channel and by polling, against a private lab server. The baseline
/// is the alert's own API round trip, measured in the same run: the channel should add
/// little to it, polling about half an interval.
struct AlertsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "alerts",
        abstract: "Alert latency, duress alert sent on A → banner on B: WebSocket channel vs polling vs the API round trip.",
        discussion: "Starts fieldhal-labserver (beside this executable) on a free loopback port; kit B is a subscription in this process.")

    @Option(help: "Alerts per transport.") var rounds = 10
    @Option(help: "The poll interval for the polling run, in milliseconds.") var pollIntervalMs = 1000
    @Flag(help: "Print the result as JSON.") var json = false

    struct Figures: Encodable {
        var medianMs, p90Ms, maxMs: Double
        init(_ values: [Double]) {
            let sorted = values.sorted()
            medianMs = sorted[sorted.count / 2]
            p90Ms = sorted[min(sorted.count - 1, Int((Double(sorted.count) * 0.9).rounded(.up)) - 1)]
            maxMs = sorted.last ?? 0
        }
    }

    struct Report: Encodable {
        var rounds, pollIntervalMs: Int
        var apiRoundTrip, webSocket, polling: Figures
        var webSocketOverRoundTrip, pollingOverHalfInterval: Double
        var peakRSSMiB: Double
    }

    func validate() throws {
        guard (1...200).contains(rounds) else { throw ValidationError("--rounds must be 1–200") }
        guard (1000...60_000).contains(pollIntervalMs) else { throw ValidationError("--poll-interval-ms must be 1000–60000") }
    }

    func run() async throws {
        let directory = try ScratchDirectory.make("fieldhal-bench-alerts")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let lab = try LabProcess.start(directory: directory)
        defer { lab.stop() }
        let client = TransrifyClient(baseURL: lab.baseURL, tenantKey: lab.tenantKey)
        var components = URLComponents(url: lab.baseURL, resolvingAgainstBaseURL: false)!
        components.scheme = "ws"
        components.path = TransrifyAPI.alertsChannelPath
        let channel = AlertChannel(url: components.url!, tenantKey: lab.tenantKey)
        let session = try await client.login(customerRef: lab.customerRef, pin: lab.duressPin, device: Environment.deviceInfo, geo: nil)
        guard let sessionId = session.sessionId else {
            throw FieldHALError(.protocolError, subject: "bench alerts", detail: "the lab server gave no session")
        }

        var roundTrips: [Double] = []
        func measure(_ channel: AlertChannel?) async throws -> [Double] {
            let settings = try AlertSettings(radiusMeters: nil, pollIntervalMilliseconds: channel == nil ? pollIntervalMs : 3_600_000)
            let subscription = AlertSubscription(watcher: AlertWatcher(client: client, settings: settings, own: nil), channel: channel,
                                                 here: { nil })
            let arrivals = LockedValue<[String: ContinuousClock.Instant]>([:])
            let ready = LockedValue(false)
            let listening = Task {
                await subscription.run { event in
                    switch event {
                    case .announce(let banner): arrivals.withLock { $0[banner.alert.alertId] = .now }
                    case .transport(.webSocket, _): ready.withLock { $0 = true }
                    case .transport(.polling, _), .problem: break
                    }
                }
            }
            defer { listening.cancel() }
            if channel != nil { try await wait(upTo: .seconds(10)) { ready.value } }
            try await Task.sleep(for: .milliseconds(200))  // past the first poll
            var latencies: [Double] = []
            for _ in 0..<rounds {
                // Polling: alerts land anywhere in the interval, as in the field.
                if channel == nil { try await Task.sleep(for: .milliseconds(Int.random(in: 0..<pollIntervalMs))) }
                let sent = ContinuousClock.now
                let alertId = try await client.sendDuressAlert(sessionId: sessionId, geo: nil, device: Environment.deviceInfo).alertId
                roundTrips.append((ContinuousClock.now - sent).seconds * 1000)
                try await wait(upTo: .milliseconds(pollIntervalMs * 2 + 5000)) { arrivals.value[alertId] != nil }
                latencies.append((arrivals.value[alertId]! - sent).seconds * 1000)
            }
            return latencies
        }
        let webSocket = try await measure(channel)
        let polling = try await measure(nil)
        let apiRoundTrip = Figures(roundTrips)
        let report = Report(rounds: rounds, pollIntervalMs: pollIntervalMs, apiRoundTrip: apiRoundTrip,
                            webSocket: Figures(webSocket), polling: Figures(polling),
                            webSocketOverRoundTrip: Figures(webSocket).medianMs / apiRoundTrip.medianMs,
                            pollingOverHalfInterval: Figures(polling).medianMs / (Double(pollIntervalMs) / 2),
                            peakRSSMiB: Self.peakRSSMiB())
        try Output.emit(report, json: json) {
            func row(_ name: String, _ figures: Figures) -> String {
                name.padding(toLength: 24, withPad: " ", startingAt: 0)
                    + String(format: "median %8.1f ms   p90 %8.1f ms   max %8.1f ms", figures.medianMs, figures.p90Ms, figures.maxMs)
            }
            return """
            Alert latency, duress alert sent on A → banner on B (\(rounds) alerts each, lab server on loopback)
            \(row("API round trip", report.apiRoundTrip))
            \(row("WebSocket channel", report.webSocket))
            \(row("polling every \(pollIntervalMs) ms", report.polling))
            WebSocket / API round trip: \(String(format: "%.2f", report.webSocketOverRoundTrip))×   polling / half an interval: \(String(format: "%.2f", report.pollingOverHalfInterval))×
            peak RSS \(String(format: "%.1f", report.peakRSSMiB)) MiB
            """
        }
    }

    private static func peakRSSMiB() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_maxrss) / 1024
    }

    private func wait(upTo limit: Duration, until condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + limit
        while !condition() {
            guard ContinuousClock.now < deadline else {
                throw FieldHALError(.timeout, subject: "bench alerts", detail: "no banner within \(limit)")
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }
}
