import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALVault
import Foundation
import FieldHALCommandLine

struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "keys", abstract: "The device's key pair for sealed locations.",
                                                    subcommands: [Show.self])

    struct Show: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "show",
            abstract: "Print the device's public key (base64), creating the key pair on first use.",
            discussion: "The private key stays in the vault under the state directory and is never printed.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let keys = try DeviceKeyPair.loadOrCreate(in: try environment.vault())
            struct Shown: Encodable { let publicKey: String }
            try Output.emit(Shown(publicKey: keys.publicKeyBase64), json: global.json) { keys.publicKeyBase64 }
        }
    }
}

struct LocationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "location", abstract: "Share a location end-to-end encrypted (libsodium sealed boxes).",
        subcommands: [Seal.self, Open.self])

    struct Seal: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "seal",
            abstract: "Seal a location for one recipient and print it as base64.",
            discussion: """
            The payload is crypto_box_seal of {"lat","lon","ts","acc"}: only the recipient's private \
            key opens it. --fuzz rounds the coordinates (2 decimals ≈ 1 km, 3 ≈ 100 m) and widens \
            the accuracy to match; a recipient named in [location_sharing] brings their own fuzz.
            """)
        @OptionGroup var global: GlobalOptions
        @Option(help: ArgumentHelp("The recipient: a public key (base64) or a name from [location_sharing] recipients.", valueName: "key-or-name"))
        var to: String
        @Option(help: "Round coordinates to 2 or 3 decimals.") var fuzz: Int?
        @Flag(help: "Use the current fix from the GPS capability (the default when --lat/--lon are not given).") var fromGps = false
        @Option(help: "Latitude, degrees.") var lat: Double?
        @Option(help: "Longitude, degrees.") var lon: Double?
        @Option(help: "Accuracy, metres (with --lat/--lon; default 0).") var acc: Double = 0
        @Option(help: "Seconds to wait for a GPS fix.") var timeout: Double = 5

        func validate() throws {
            if (lat == nil) != (lon == nil) { throw ValidationError("give both --lat and --lon, or neither") }
            if fromGps && lat != nil { throw ValidationError("--from-gps and --lat/--lon exclude each other") }
            if let fuzz, fuzz != 2 && fuzz != 3 { throw ValidationError("--fuzz is 2 or 3 (decimals)") }
        }

        func execute(_ environment: Environment) async throws {
            let named = LocationSharingSettings.recipient(named: to, in: environment.configuration)
            let recipientKey = try LocationSeal.publicKey(fromBase64: named?.key ?? to)
            var location: SharedLocation
            if let lat, let lon {
                location = SharedLocation(lat: lat, lon: lon, ts: Int64(Date().timeIntervalSince1970), acc: acc)
            } else {
                let request = FixRequest(timeout: try duration(seconds: timeout, option: "--timeout"))
                // The daemon's warm receiver when one answers, as `gps fix`.
                let served = request.timeout <= .seconds(60)
                    ? try await environment.throughDaemon { try await GPSFixCommand.fix(request, from: $0) } : nil
                let reading: LocationReading
                if let served {
                    reading = served
                } else {
                    reading = try await environment.withKit(for: .location) { kit in try await kit.location().currentFix(request) }
                }
                guard let fromFix = SharedLocation(reading.fix) else {
                    throw FieldHALError(.noFix, subject: "location seal", detail: "the GPS fix has no position")
                }
                location = fromFix
            }
            if let decimals = fuzz ?? named?.fuzz { location = location.fuzzed(toDecimals: decimals) }
            let payload = try LocationSeal.seal(location, for: recipientKey)
            struct Sealed: Encodable { let payload: String; let location: SharedLocation }
            try Output.emit(Sealed(payload: payload, location: location), json: global.json) { payload }
        }
    }

    struct Open: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "open",
            abstract: "Open a sealed location addressed to this device and check its age.")
        @OptionGroup var global: GlobalOptions
        @Argument(help: "The base64 payload ('-' reads it from standard input).") var payload: String
        @Option(help: "Reject a location older than this many seconds (default: [location_sharing] window_s, else 600).")
        var maxAge: Int?

        func execute(_ environment: Environment) async throws {
            let text = payload == "-" ? (readLine(strippingNewline: true) ?? "") : payload
            let window = maxAge ?? LocationSharingSettings.window(in: environment.configuration) ?? 600
            guard window > 0 else { throw ValidationError("--max-age must be positive") }
            let keys = try DeviceKeyPair.loadOrCreate(in: try environment.vault())
            let location = try LocationSeal.open(text, with: keys, maximumAge: .seconds(window))
            try Output.emit(location, json: global.json) {
                let when = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(location.ts)))
                return String(format: "%.6f, %.6f ±%.1f m at %@", location.lat, location.lon, location.acc, when)
            }
        }
    }
}
