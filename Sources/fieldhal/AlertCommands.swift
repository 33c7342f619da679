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
