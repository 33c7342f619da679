import FieldHAL
import FieldHALServer
import FieldHALFlows
import Foundation
import Transrify
import TransrifyAlertChannel
#if canImport(Glibc)
import Glibc
#endif

/// `[transrify]`: which API the flows talk to (Req 16.2, 16.4). The tenant key is not here:
/// it lives in the vault (`fieldhal tenant set-key`).
public enum TransrifySettings {
    public static let specs: [ParameterSpec] = [
        ParameterSpec("environment", .string, help: "development (default), staging or production"),
        ParameterSpec("development_url", .string, help: "API base URL in development (default http://127.0.0.1:8787, the lab server)"),
        ParameterSpec("staging_url", .string, help: "API base URL in staging"),
        ParameterSpec("production_url", .string, help: "API base URL in production"),
        ParameterSpec("upload_hosts", .strings,
                      help: "hosts evidence may be uploaded to besides the API's own, as presign names them (\"*.example.net\" for its subdomains); outside development only over https"),
        ParameterSpec("finalize_path", .string, help: "evidence finalize path (default /evidence/finalize)"),
        ParameterSpec("evidence_audio_seconds", .integer, help: "length of the audio evidence recorded in limited mode (default 10)"),
        ParameterSpec("evidence_video_seconds", .integer, help: "length of the video evidence recorded in limited mode (default 10; Motion-JPEG AVI)"),
        ParameterSpec("evidence_segment_seconds", .integer,
                      help: "record audio and video evidence in segments this long, each uploaded as it closes (default 4; 0: one file per kind, recorded in turn)"),
        ParameterSpec("evidence_video_width", .integer, help: "video evidence width (default 640; the camera's nearest size is used)"),
        ParameterSpec("evidence_video_height", .integer, help: "video evidence height (default 480)"),
        ParameterSpec("evidence_video_fps", .integer, help: "video evidence frames per second (default 30; the camera's nearest rate is used)"),
        ParameterSpec("alert_radius_meters", .integer, help: "nearby alerts within this radius, 100–10000 (default 1000; env ALERT_RADIUS_METERS)"),
        ParameterSpec("alert_poll_interval_ms", .integer, help: "poll for nearby alerts this often (default 15000; env ALERT_POLL_INTERVAL_MS)"),
        ParameterSpec("alerts_websocket_url", .string, help: "the alerts WebSocket channel, ws:// or wss:// (default none: polling; env ALERTS_WEBSOCKET_URL)"),
        ParameterSpec("nfc_enabled", .boolean, help: "NFC acknowledgement and the duressed kit's tag (default false)"),
        ParameterSpec("nfc_emulation_s", .integer, help: "how long a duressed kit offers its tag after sign-in (default 1800)"),
        ParameterSpec("background_run_s", .integer,
                      help: "without a daemon: how long the background run after every sign-in or unlock lives, whatever the verdict (default 900; at least nfc_emulation_s with NFC)"),
    ]

    public static let defaultDevelopmentURL = "http://127.0.0.1:8787"

    /// The configured environment: development, staging or production.
    public static func environment(in configuration: KitConfiguration) throws -> String {
        let environment = configuration.settings["transrify"]?.string("environment") ?? "development"
        guard ["development", "staging", "production"].contains(environment) else {
            throw configuration.error(at: ["transrify", "environment"], "\"\(environment)\" is not development, staging or production")
        }
        return environment
    }

    /// Where requests and evidence may go: cleartext only in development (the lab server);
    /// evidence to the API's host and `upload_hosts`.
    public static func transport(in configuration: KitConfiguration) throws -> TransportPolicy {
        let hosts = configuration.settings["transrify"]?.strings("upload_hosts") ?? []
        for host in hosts where host.isEmpty || host.contains("/") || host.contains(":") || host.contains(" ") {
            throw FieldHALError(.invalidArgument, subject: "[transrify] upload_hosts",
                                detail: "\"\(host)\" is not a host name", advice: "list bare host names, like \"evidence.example.net\" or \"*.example.net\"")
        }
        return TransportPolicy(allowsCleartext: try environment(in: configuration) == "development", uploadHosts: hosts)
    }

    /// Req 35: the alerts channel `[transrify] alerts_websocket_url` (or the environment's
    /// ALERTS_WEBSOCKET_URL) names, checked; nil means polling only.
    public static func alertChannelURL(in configuration: KitConfiguration) throws -> URL? {
        let text = ProcessInfo.processInfo.environment["ALERTS_WEBSOCKET_URL"].flatMap { $0.isEmpty ? nil : $0 }
            ?? configuration.settings["transrify"]?.string("alerts_websocket_url")
        guard let text else { return nil }
        let url: URL
        let key = ["transrify", "alerts_websocket_url"]
        do { url = try AlertChannel.validated(text) } catch {
            throw configuration.error(at: key, "\"\(text)\" is not a ws:// or wss:// URL")
        }
        // The tenant key travels in the channel's query: in clear only to a development lab.
        guard try transport(in: configuration).allows(scheme: url.scheme) else {
            throw configuration.error(at: key, "\"\(text)\" is not wss: the tenant key would travel in clear; "
                                      + "use wss://…, or environment = \"development\" for a lab server")
        }
        return url
    }

    /// The base URL of the configured environment.
    public static func baseURL(in configuration: KitConfiguration) throws -> URL {
        let section = configuration.settings["transrify"]
        let environment = try environment(in: configuration)
        let text = section?.string("\(environment)_url") ?? (environment == "development" ? defaultDevelopmentURL : nil)
        guard let text else {
            throw FieldHALError(.notConfigured, subject: "[transrify]", detail: "no \(environment)_url for the \(environment) environment",
                                advice: "add \(environment)_url = \"https://…\" to [transrify]")
        }
        // A wrong URL is the file's fault: a configuration error with its line (exit 78).
        let key = ["transrify", "\(environment)_url"]
        guard let url = URL(string: text), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw configuration.error(at: key, "\"\(text)\" is not an http(s) URL")
        }
        // The PIN and the tenant key travel in these requests: cleartext only to the lab.
        guard environment == "development" || url.scheme == "https" else {
            throw configuration.error(at: key, "\"\(text)\" is not https: \(environment) would send PINs and the tenant key in clear; "
                                      + "use https://…, or environment = \"development\" for a lab server")
        }
        return url
    }
}

extension Environment {
    /// The API client: the configured base URL and the tenant key from the vault.
    public func transrifyClient() throws -> TransrifyClient {
        var client = TransrifyClient(baseURL: try TransrifySettings.baseURL(in: configuration),
                                     tenantKey: try TenantKeyStore(vault: try vault()).load(),
                                     transport: try TransrifySettings.transport(in: configuration))
        if let path = configuration.settings["transrify"]?.string("finalize_path") { client.finalizePath = path }
        return client
    }

    public func sessionStore() throws -> SessionStore { SessionStore(vault: try vault()) }

    public static let deviceInfo = DeviceInfo(platform: "linux", version: FieldHALVersion.current)
}


/// `[location_sharing]`: how long a received location stays acceptable, and the people
/// this kit shares with, each with an optional fuzz (seed 001's per-friend privacy rule).
public enum LocationSharingSettings {
    public static let specs: [ParameterSpec] = [
        ParameterSpec("window_s", .integer, help: "reject a received location older than this many seconds (default 600)"),
        ParameterSpec("recipients", .records([
            ParameterSpec("name", .string, required: true, help: "a name to pass to --to"),
            ParameterSpec("key", .string, required: true, help: "their public key, base64, from `fieldhal keys show`"),
            ParameterSpec("fuzz", .integer, help: "round coordinates to 2 or 3 decimals for them"),
        ]), help: "named recipients"),
    ]

    public struct Recipient {
        public var key: String
        public var fuzz: Int?
    }

    public static func window(in configuration: KitConfiguration) -> Int? {
        configuration.settings["location_sharing"]?.integer("window_s")
    }

    public static func recipient(named name: String, in configuration: KitConfiguration) -> Recipient? {
        let records = configuration.settings["location_sharing"]?.records("recipients") ?? []
        guard let record = records.first(where: { $0.string("name") == name }), let key = record.string("key") else { return nil }
        return Recipient(key: key, fuzz: record.integer("fuzz"))
    }
}


/// `[daemon]`: the control socket's settings, from before the API replaced it. Still
/// accepted, so that a configuration written for an older release loads; the daemon says
/// once that they are not used.
public enum DaemonSettings {
    public static let specs: [ParameterSpec] = [
        ParameterSpec("socket", .string, help: "no longer used: the control socket is gone; commands use the API's [api] socket"),
        ParameterSpec("socket_group", .string, help: "no longer used: who may use the API is [api] group and grants"),
    ]

    /// The line the daemon logs when the configuration still has them.
    public static func obsolete(in configuration: KitConfiguration) -> String? {
        guard let section = configuration.settings["daemon"], section.string("socket") != nil || section.string("socket_group") != nil else {
            return nil
        }
        return "[daemon] socket and socket_group are no longer used: commands reach the daemon on [api] socket; remove them"
    }
}

