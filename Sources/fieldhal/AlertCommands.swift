import ArgumentParser
import FieldHAL
import FieldHALFlows
import Foundation
import Transrify

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
    }

    struct List: FieldHALSubcommand {
        static let configuration = CommandConfiguration(abstract: "Ask once for nearby duress alerts and print them.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let session = try environment.signedInSession()
            let watcher = AlertWatcher(client: try environment.transrifyClient(), settings: try environment.alertSettings())
            let kit = await environment.loadKit(only: [.location])
            let here = await environment.here(kit)
            await kit.close()
            let poll = try await watcher.poll(here: here, excluding: session.alertId)
            let reports = poll.banners.map(BannerReport.init)
            try Output.emit(reports, json: global.json) {
                reports.isEmpty ? "No nearby duress alerts." : reports.map { "\($0.text)  [alert \($0.alertId)]" }.joined(separator: "\n")
            }
        }
    }

    struct Watch: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            abstract: "Poll for nearby duress alerts until interrupted: banner, haptic \"warning\", debounced 60 s per alert.")
        @OptionGroup var global: GlobalOptions
        @Option(help: "Stop after this many polls (default: never).") var polls: Int?

        func execute(_ environment: Environment) async throws {
            let session = try environment.signedInSession()
            let settings = try environment.alertSettings()
            let watcher = AlertWatcher(client: try environment.transrifyClient(), settings: settings)
            let kit = await environment.loadKit(only: [.location, .haptics])
            defer { Task { await kit.close() } }
            var count = 0
            while polls.map({ count < $0 }) ?? true {
                count += 1
                do {
                    let poll = try await watcher.poll(here: await environment.here(kit), excluding: session.alertId)
                    for banner in poll.announce {
                        try Output.emit(BannerReport(banner), json: global.json) { "\(banner.text)  [alert \(banner.alert.alertId)]" }
                        // Req 29: the haptic "warning"; a kit without haptics still shows the banner.
                        try? await kit.haptics().play(.warning)
                    }
                } catch let error as TransrifyError {
                    FileHandle.standardError.write(Data("fieldhal: \(error.userMessage)\n".utf8))
                }
                if polls.map({ count >= $0 }) ?? false { break }
                try await Task.sleep(for: settings.pollInterval)
            }
        }
    }

    struct Ack: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
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
            let session = try environment.signedInSession()
            let client = try environment.transrifyClient()
            var target = alertId
            let method: AckMethod
            if nfc {
                guard environment.nfcEnabled else {
                    throw FieldHALError(.notConfigured, subject: "alerts ack --nfc", detail: "NFC is disabled",
                                        advice: "set nfc_enabled = true in [transrify]")
                }
                let wait = try duration(seconds: timeout, option: "--timeout")
                let tag = try await environment.withKit(for: .nfcReader) { kit in try await kit.nfcReader().readTag(timeout: wait) }
                guard let read = DuressTagPayload.alertId(in: tag.ndef) else {
                    throw FieldHALError(.malformedData, subject: "nfc tag \(tag.uidString)", detail: "no trf:duress:<alertId> record on this tag")
                }
                if let target, target != read {
                    throw FieldHALError(.invalidArgument, subject: "alerts ack --nfc", detail: "the tag is for alert \(read), not \(target)")
                }
                target = read
                method = .nfc
            } else {
                method = .inApp
            }
            guard let target else { throw ValidationError("give the alert's id, or --nfc") }
            do {
                _ = try await client.acknowledge(alertId: target, customerRef: session.customerRef, method: method)
            } catch let error as TransrifyError {
                FileHandle.standardError.write(Data("fieldhal: \(error.userMessage) The alert is still active.\n".utf8))
                throw ExitCode(1)
            }
            // Req 27.5: haptic feedback on acknowledgement, when the kit has haptics.
            let kit = await environment.loadKit(only: [.haptics])
            try? await kit.haptics().play(.success)
            await kit.close()
            print("Acknowledged alert \(target) (\(method.rawValue)).")
        }
    }
}
