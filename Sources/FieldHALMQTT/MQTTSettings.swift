import FieldHAL
import FieldHALAPI
import Foundation

/// `[mqtt]`: the broker a fleet already runs, and what the kit publishes to it (docs/fleet.md).
///
/// Plain MQTT is for a broker on this machine only (a local mosquitto that bridges to the
/// fleet's over TLS is the usual shape): anything past loopback is `mqtts://`, because the
/// kit's devices and fixes would otherwise cross the network in the clear.
public struct MQTTSettings: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var usesTLS: Bool
    /// The CA bundle the broker's certificate is checked against; nil: the system's.
    public var caFile: String?
    /// A client certificate and its key, for brokers that tell clients apart by certificate.
    public var certificateFile: String?
    public var keyFile: String?
    public var username: String?
    /// A file (mode 0600, ours) holding the password, so it is not in the configuration.
    public var passwordFile: String?
    /// The MQTT client id, which is also the broker's key for the kit's persistent session.
    public var clientID: String
    /// Every topic the kit publishes starts with this (`fieldhal/<client_id>`).
    public var topicPrefix: String
    /// Home Assistant's discovery prefix; nil: no discovery messages.
    public var discoveryPrefix: String?
    /// At most one fix per receiver this often; nil: fixes are not published.
    public var fixInterval: Duration?
    /// Messages kept on disk for the broker at most; past it the oldest is dropped (and counted).
    public var queueLimit: Int
    public var keepAlive: Int
    /// The longest wait between two tries to reach the broker (the first is 1 s, doubling):
    /// short by default, so a broker that comes back gets the backlog at once (issue 46:
    /// within 2 s); a reconnection is one TCP handshake, cheap for a broker's few kits.
    public var reconnectLimit: Duration
    /// What commands on `<prefix>/command` may do, as a grant's scopes; empty: the kit
    /// subscribes to nothing (the default).
    public var commands: Set<APIScope> = []
    /// Publish the tags API clients read and see come and go (`<prefix>/events/tag`).
    public var tags = false

    public static let specs: [ParameterSpec] = [
        ParameterSpec("broker", .string, required: true,
                      help: "the broker's URL: \"mqtt://127.0.0.1:1883\" (plain, this machine only) or \"mqtts://broker.example:8883\""),
        ParameterSpec("client_id", .string, help: "the MQTT client id (default \"fieldhal-\" and the host's name); the broker keeps the kit's session under it"),
        ParameterSpec("topic_prefix", .string, help: "what every topic starts with (default \"fieldhal/\" and the client id)"),
        ParameterSpec("discovery_prefix", .string, help: "Home Assistant's discovery prefix (default \"homeassistant\"; \"\" for none)"),
        ParameterSpec("fixes", .boolean, help: "publish the receivers' fixes (default true; the bridge then keeps the receivers followed)"),
        ParameterSpec("fix_interval_s", .number, range: 0...86_400,
                      help: "at most one fix per receiver this often, in seconds (default 10; 0: every fix)"),
        ParameterSpec("queue_limit", .integer, range: 1...1_000_000,
                      help: "messages kept on disk while the broker is away (default 10000); past it the oldest goes"),
        ParameterSpec("keepalive_s", .integer, range: 5...3_600,
                      help: "MQTT keep-alive in seconds (default 30): the broker announces the kit offline after 1.5 times it without a word"),
        ParameterSpec("reconnect_max_s", .integer, range: 1...3_600,
                      help: "the longest wait between tries to reach the broker, in seconds (default 2: a broker back after an outage gets the kit's backlog within about 2 s; a fleet of thousands may want more)"),
        ParameterSpec("ca_file", .string, help: "mqtts: the CA certificates the broker's certificate is checked against (default: the system's)"),
        ParameterSpec("cert_file", .string, help: "mqtts: a client certificate (PEM), with key_file"),
        ParameterSpec("key_file", .string, help: "mqtts: the client certificate's key (PEM)"),
        ParameterSpec("username", .string, help: "the user name the broker knows the kit by"),
        ParameterSpec("password_file", .string, help: "a file (mode 0600) holding the password, with username"),
        ParameterSpec("commands", .strings,
                      help: "take API requests on <prefix>/command with these scopes, as a grant's (default none: the kit subscribes to nothing): "
                      + APIScope.allCases.map(\.rawValue).joined(separator: ", ")),
        ParameterSpec("tags", .boolean, help: "publish the tags API clients read, and those their tag events see come and go (default false)"),
    ]

    /// The `[mqtt]` section, or nil when there is none.
    public init?(settings: PluginParameters?, file: String, hostName: String = ProcessInfo.processInfo.hostName) throws(ConfigError) {
        guard let settings else { return nil }
        func refuse(_ key: String, _ message: String) -> ConfigError { ConfigError(file: file, key: "mqtt.\(key)", message: message) }
        let broker = settings.string("broker") ?? ""
        guard let url = URLComponents(string: broker), let scheme = url.scheme, ["mqtt", "mqtts"].contains(scheme),
              let host = url.host, !host.isEmpty, url.path.isEmpty || url.path == "/", url.query == nil, url.user == nil else {
            throw refuse("broker", "\"\(TerminalText.escaped(broker))\" is not a broker's URL: write it as \"mqtt://127.0.0.1:1883\" or \"mqtts://broker.example:8883\"")
        }
        usesTLS = scheme == "mqtts"
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        port = url.port ?? (usesTLS ? 8883 : 1883)
        guard (1...65_535).contains(port) else { throw refuse("broker", "port \(port) is not a TCP port") }
        if !usesTLS && !WebOrigin.isLoopback(self.host) {
            throw refuse("broker", "plain MQTT to \(TerminalText.escaped(self.host)) would send the kit's devices and fixes in the clear: use mqtts:// (with ca_file), or a mosquitto on this machine that bridges to the fleet's broker over TLS")
        }
        caFile = settings.string("ca_file")
        certificateFile = settings.string("cert_file")
        keyFile = settings.string("key_file")
        if (certificateFile == nil) != (keyFile == nil) {
            throw refuse(certificateFile == nil ? "cert_file" : "key_file", "a client certificate needs both cert_file and key_file")
        }
        if !usesTLS, caFile != nil || certificateFile != nil {
            throw refuse(caFile != nil ? "ca_file" : "cert_file", "certificates are for an mqtts:// broker; this one is plain mqtt://")
        }
        username = settings.string("username")
        passwordFile = settings.string("password_file")
        if passwordFile != nil && username == nil { throw refuse("password_file", "a password needs a username") }

        let defaultID = "fieldhal-" + (Self.segment(hostName.split(separator: ".").first.map(String.init) ?? "kit"))
        clientID = settings.string("client_id") ?? defaultID
        guard !clientID.isEmpty, clientID.utf8.count <= 128, clientID.allSatisfy({ Self.isTopicCharacter($0) }) else {
            throw refuse("client_id", "\"\(TerminalText.escaped(clientID))\" is not a client id: 1 to 128 letters, digits, '-' or '_'")
        }
        topicPrefix = settings.string("topic_prefix") ?? "fieldhal/\(clientID)"
        guard Self.isTopicPrefix(topicPrefix) else {
            throw refuse("topic_prefix", "\"\(TerminalText.escaped(topicPrefix))\" is not a topic prefix: levels of letters, digits, '-' or '_' between single slashes")
        }
        let discovery = settings.string("discovery_prefix") ?? "homeassistant"
        guard discovery.isEmpty || Self.isTopicPrefix(discovery) else {
            throw refuse("discovery_prefix", "\"\(TerminalText.escaped(discovery))\" is not a topic prefix")
        }
        discoveryPrefix = discovery.isEmpty ? nil : discovery
        fixInterval = (settings.boolean("fixes") ?? true) ? .milliseconds(Int64(((settings.number("fix_interval_s") ?? 10) * 1000).rounded())) : nil
        queueLimit = settings.integer("queue_limit") ?? 10_000
        keepAlive = settings.integer("keepalive_s") ?? 30
        reconnectLimit = .seconds(settings.integer("reconnect_max_s") ?? 2)
        for name in settings.strings("commands") ?? [] {
            guard let scope = APIScope(rawValue: name) else {
                throw refuse("commands", "\"\(TerminalText.escaped(name))\" is not a scope; the scopes: " + APIScope.allCases.map(\.rawValue).joined(separator: ", "))
            }
            commands.insert(scope)
        }
        tags = settings.boolean("tags") ?? false
    }

    /// A broker on loopback, for the tests and for a local mosquitto.
    public init(host: String = "127.0.0.1", port: Int, clientID: String, topicPrefix: String? = nil, discoveryPrefix: String? = "homeassistant",
                fixInterval: Duration? = .zero, queueLimit: Int = 10_000, keepAlive: Int = 30, reconnectLimit: Duration = .seconds(1),
                commands: Set<APIScope> = [], tags: Bool = false) {
        self.host = host
        self.port = port
        usesTLS = false
        self.clientID = clientID
        self.topicPrefix = topicPrefix ?? "fieldhal/\(clientID)"
        self.discoveryPrefix = discoveryPrefix
        self.fixInterval = fixInterval
        self.queueLimit = queueLimit
        self.keepAlive = keepAlive
        self.reconnectLimit = reconnectLimit
        self.commands = commands
        self.tags = tags
    }

    /// Where the broker is, for log lines.
    public var place: String { "\(usesTLS ? "mqtts" : "mqtt")://\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    static func isTopicCharacter(_ character: Character) -> Bool {
        character.isASCII && (character.isLetter || character.isNumber || character == "-" || character == "_")
    }

    static func isTopicPrefix(_ prefix: String) -> Bool {
        let levels = prefix.split(separator: "/", omittingEmptySubsequences: false)
        return prefix.utf8.count <= 200 && !levels.isEmpty && levels.allSatisfy { !$0.isEmpty && $0.allSatisfy(isTopicCharacter) }
    }

    /// `name` as one topic level: anything but letters, digits, '-' and '_' becomes '_'.
    public static func segment(_ name: String) -> String {
        let kept = String(name.map { isTopicCharacter($0) ? $0 : "_" })
        return kept.isEmpty ? "_" : kept
    }
}
