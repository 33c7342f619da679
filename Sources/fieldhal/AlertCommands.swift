import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALClient
import FieldHALAPI
import FieldHALFlows
import Foundation
import Transrify
import TransrifyAlertChannel
import FieldHALCommandLine

extension Environment {
    /// `[transrify] alert_radius_meters` / `alert_poll_interval_ms`, overridden by the
    /// seed's ALERT_RADIUS_METERS / ALERT_POLL_INTERVAL_MS environment variables (Req 33).
    func alertSettings() throws -> AlertSettings {
        let section = configuration.settings["transrify"]
        let variables = ProcessInfo.processInfo.environment
        func number(_ variable: String) throws -> Int? {
            guard let text = variables[variable], !text.isEmpty else { return nil }
            guard let value = Int(text) else {
                throw FieldHALError(.invalidArgument, subject: variable, detail: "\"\(text)\" is not a whole number")
            }
            return value
        }
        return try AlertSettings(radiusMeters: try number("ALERT_RADIUS_METERS") ?? section?.integer("alert_radius_meters"),
                                 pollIntervalMilliseconds: try number("ALERT_POLL_INTERVAL_MS") ?? section?.integer("alert_poll_interval_ms"))
    }

    /// Req 35: the alerts channel when `[transrify] alerts_websocket_url` (or the
    /// environment's ALERTS_WEBSOCKET_URL) names one; nil means polling only.
    func alertChannel(session: SessionRecord? = nil) throws -> AlertChannel? {
        guard let url = try TransrifySettings.alertChannelURL(in: configuration) else { return nil }
        guard let key = try TenantKeyStore(vault: try vault()).load() else {
            throw FieldHALError(.notConfigured, subject: "alerts", detail: "no tenant key", advice: "run fieldhal tenant set-key")
        }
        return AlertChannel(url: url, tenantKey: key, sessionId: session?.sessionId)
    }

    /// The alert watcher of a signed-in kit: its user's own alerts left out, the debounce
    /// record sealed in the state directory (shared by the daemon and `alerts watch`, and
    /// kept across their restarts).
    func alertWatcher(session: SessionRecord) throws -> AlertWatcher {
        let settings = try alertSettings()
        let own = OwnIdentity(customerRef: session.customerRef, sessionId: session.sessionId, alertIds: Set([session.alertId].compactMap { $0 }))
        return AlertWatcher(client: try transrifyClient(), settings: settings, own: own,
                            debounce: AlertDebounce(window: settings.debounce, store: SealedAlertDebounceStore(vault: try vault())))
    }

    /// The subscription of a signed-in kit: its position asked per alert.
    func alertSubscription(session: SessionRecord, kit: Kit) throws -> AlertSubscription {
        try alertSubscription(session: session) { [self] in await here(kit) }
    }

    /// `here`: the kit's position for each request (the daemon's comes from its shared receiver).
    func alertSubscription(session: SessionRecord, here: @escaping @Sendable () async -> Geolocation?) throws -> AlertSubscription {
        AlertSubscription(watcher: try alertWatcher(session: session), channel: try alertChannel(session: session), here: here)
    }

    /// Req 30: NFC features only when enabled (`[transrify] nfc_enabled = true`); off, no
    /// NFC code path is touched.
    var nfcEnabled: Bool { configuration.settings["transrify"]?.boolean("nfc_enabled") ?? false }

    func signedInSession() throws -> SessionRecord {
        guard let record = try sessionStore().load() else {
            throw FieldHALError(.notConfigured, subject: "alerts", detail: "not signed in", advice: "run fieldhal signin first")
        }
        return record
    }

    /// The kit's position for alert requests: live within 5 s, else cached, else none.
    func here(_ kit: Kit) async -> Geolocation? { await (try? kit.location())?.geolocation() }
}

struct AlertsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "alerts", abstract: "Nearby duress alerts for the tenant: list, watch, acknowledge.",
        subcommands: [List.self, Watch.self, Ack.self], defaultSubcommand: List.self)

    struct BannerReport: Encodable {
        var alertId, customerRef, text: String
        var distanceMeters: Double?
        init(_ banner: AlertBanner) {
            alertId = banner.alert.alertId
            customerRef = banner.alert.customerRef
            text = banner.text
            distanceMeters = banner.distanceMeters.map { ($0 * 10).rounded() / 10 }
        }

        init(_ alert: APIAlert) {
            alertId = alert.alertId
            customerRef = alert.customerRef
            text = alert.text
            distanceMeters = alert.distanceMeters
        }
    }

    struct List: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "Ask once for nearby duress alerts and print them.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let reports: [BannerReport]
            if let answer = try await environment.throughDaemon({ try await $0.alerts() }) {
                reports = answer.alerts.map(BannerReport.init)
            } else {
                let session = try environment.signedInSession()
                let watcher = try environment.alertWatcher(session: session)
                let kit = await environment.loadKit(only: [.location])
                let here = await environment.here(kit)
                await kit.close()
                reports = try await watcher.list(here: here).map(BannerReport.init)
            }
            try Output.emit(reports, json: global.json) {
                reports.isEmpty ? "No nearby duress alerts." : reports.map { "\(TerminalText.escaped($0.text))  [alert \(TerminalText.escaped($0.alertId))]" }.joined(separator: "\n")
            }
        }
    }

    struct Watch: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "watch",
            abstract: "Watch for nearby duress alerts until interrupted: banner, haptic \"warning\" and soft alert sound.",
            discussion: """
            Over the WebSocket channel when [transrify] alerts_websocket_url is set, else (and \
            while the channel is down) by polling every alert_poll_interval_ms. Each alert \
            buzzes and sounds at most once a minute. Banners go to standard output; changes of \
            channel and failed polls to standard error. With a daemon answering on the \
            configuration's [api] socket, the command prints the banners the daemon announces \
            (the daemon plays the feedback, once).
            """)
        @OptionGroup var global: GlobalOptions
        @Option(help: "Stop after this many seconds (default: never).") var seconds: Double?

        func execute(_ environment: Environment) async throws {
            let stopAfter = try seconds.map { try duration(seconds: $0, option: "--seconds") }
            // With a daemon, the banners it announces (it plays the haptic and the sound): a
            // second subscription here would announce each alert twice.
            if try await environment.throughDaemon({ try await follow($0, for: stopAfter) }) != nil { return }
            let session = try environment.signedInSession()
            let kit = await environment.loadKit(only: [.location, .haptics, .speaker])
            let subscription = try environment.alertSubscription(session: session, kit: kit)
            let json = global.json
            let watching = Task {
                let lastProblem = LockedValue<String?>(nil)
                await subscription.run { event in
                    switch event {
                    case .announce(let banner):
                        try? Output.emit(BannerReport(banner), json: json, streaming: true) { "\(TerminalText.escaped(banner.text))  [alert \(TerminalText.escaped(banner.alert.alertId))]" }
                        await AlertFeedback.announce(on: kit)
                    case .transport(.webSocket, _):
                        FileHandle.standardError.write(Data("fieldhal: alerts over the WebSocket channel\n".utf8))
                    case .transport(.polling, let reason):
                        let why = reason.map { " (\($0))" } ?? ""
                        FileHandle.standardError.write(Data("fieldhal: alerts by polling\(why)\n".utf8))
                    case .problem(let problem):
                        // Once per distinct problem: a network that stays down is one line, not one a poll.
                        if lastProblem.withLock({ last in defer { last = problem }; return last != problem }) {
                            FileHandle.standardError.write(Data("fieldhal: \(problem)\n".utf8))
                        }
                    }
                }
            }
            if let stopAfter {
                try? await Task.sleep(for: stopAfter)
                watching.cancel()
            }
            await withTaskCancellationHandler { await watching.value } onCancel: { watching.cancel() }
            await kit.close()
        }

        /// The daemon's `alert` events, printed as this command prints its own banners.
        func follow(_ daemon: FieldHALClient, for stopAfter: Duration?) async throws {
            let session = try await daemon.session()
            guard session.signedIn else {
                throw FieldHALError(.notConfigured, subject: "alerts", detail: "not signed in", advice: "run fieldhal signin first")
            }
            FileHandle.standardError.write(Data("fieldhal: alerts through the daemon (\(session.alerts))\n".utf8))
            let json = global.json
            let following = Task {
                for try await event in daemon.events([.alert]) {
                    guard case .alert(let alert) = event else { continue }
                    try? Output.emit(BannerReport(alert), json: json, streaming: true) { "\(TerminalText.escaped(alert.text))  [alert \(TerminalText.escaped(alert.alertId))]" }
                }
            }
            let timer = Task {
                guard let stopAfter else { return }
                try? await Task.sleep(for: stopAfter)
                following.cancel()
            }
            defer { timer.cancel() }
            do {
                try await withTaskCancellationHandler { try await following.value } onCancel: { following.cancel() }
            } catch where following.isCancelled {
                // --seconds ran out, or the command was interrupted: the end of the watch.
            }
        }
    }

    struct Ack: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "ack",
            abstract: "Acknowledge an alert: in the app (INAPP), or by reading the duressed kit's NFC tag (--nfc).",
            discussion: """
            --nfc needs nfc_enabled = true in [transrify]: it waits for a tag carrying \
            trf:duress:<alertId> (the duressed kit emulates one) and acknowledges with method NFC. \
            On failure the error is shown and the alert stays active (exit 1).
            """)
        @OptionGroup var global: GlobalOptions
        @Argument(help: "The alert's id (with --nfc: optional, checked against the tag).") var alertId: String?
        @Flag(help: "Confirm presence by reading the duressed kit's tag.") var nfc = false
        @Option(help: "Seconds to wait for the tag.") var timeout: Double = 30

        func execute(_ environment: Environment) async throws {
            if !nfc, alertId == nil { throw ValidationError("give the alert's id, or --nfc") }
            let wait = try duration(seconds: timeout, option: "--timeout")
            let acknowledged: String
            do {
                // A running daemon holds the kit's NFC chip (it may be emulating a tag): it acknowledges.
                if let answer = try await environment.throughDaemon({ daemon in
                    nfc ? try await daemon.acknowledgeByNFC(alertId: alertId, timeout: wait) : try await daemon.acknowledge(alertId: alertId ?? "")
                }) {
                    acknowledged = answer.alertId
                } else if nfc {
                    acknowledged = try await Acknowledgement.byNFC(environment, expecting: alertId, timeout: wait)
                } else {
                    try await Acknowledgement.send(environment, alertId: alertId ?? "", method: .inApp)
                    acknowledged = alertId ?? ""
                }
            } catch let failure as Acknowledgement.Failure {
                FileHandle.standardError.write(Data("fieldhal: \(failure.message)\n".utf8))
                throw ExitCode(1)
            }
            print("Acknowledged alert \(TerminalText.escaped(acknowledged)) (\(nfc ? AckMethod.nfc.rawValue : AckMethod.inApp.rawValue)).")
        }
    }
}

/// Req 27 and 31 composed from the configuration (`AlertAcknowledgement` does the work).
enum Acknowledgement {
    typealias Failure = AlertAcknowledgement.Failure

    /// `shared`, `haptics`: the daemon's chip and haptics; without them the kit's are opened here.
    static func byNFC(_ environment: Environment, expecting expected: String?, timeout: Duration,
                      shared: (any NFCReader)? = nil, haptics: (any HapticsEngine)? = nil) async throws -> String {
        guard environment.nfcEnabled else {
            throw FieldHALError(.notConfigured, subject: "alerts ack --nfc", detail: "NFC is disabled",
                                advice: "set nfc_enabled = true in [transrify]")
        }
        let acknowledgement = try flow(environment, haptics: haptics)
        if let shared { return try await acknowledgement.byNFC(reader: shared, expecting: expected, timeout: timeout) }
        return try await environment.withKit(for: .nfcReader) { kit in
            try await acknowledgement.byNFC(reader: try kit.nfcReader(), expecting: expected, timeout: timeout)
        }
    }

    static func send(_ environment: Environment, alertId: String, method: AckMethod, haptics: (any HapticsEngine)? = nil) async throws {
        try await flow(environment, haptics: haptics).send(alertId: alertId, method: method)
    }

    private static func flow(_ environment: Environment, haptics shared: (any HapticsEngine)? = nil) throws -> AlertAcknowledgement {
        AlertAcknowledgement(client: try environment.transrifyClient(), session: try environment.signedInSession()) {
            if let shared { return .init(shared) }
            let kit = await environment.loadKit(only: [.haptics])
            return .init(try? kit.haptics()) { await kit.close() }
        }
    }
}

extension Environment {
    /// The poll interval in seconds, for log lines.
    var alertPollSeconds: String {
        let interval = (try? alertSettings().pollInterval) ?? .seconds(15)
        let milliseconds = interval.components.seconds * 1000 + interval.components.attoseconds / 1_000_000_000_000_000
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000)" : String(format: "%.1f", Double(milliseconds) / 1000)
    }
}
