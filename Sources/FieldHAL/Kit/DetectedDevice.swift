/// A device a plugin found on this machine (`fieldhal detect`): what it is, how to tell it
/// again after a replug, and the parameters that make the plugin open it.
public struct DetectedDevice: Sendable, Equatable, Codable {
    public var capability: Capability
    public var plugin: String
    /// What a technician would call it: the card's name, the receiver's driver.
    public var name: String
    /// Where it is now (`/dev/video0`, `hw:Loopback,0,0`, `localhost:2947`).
    public var node: String
    /// A name that survives a replug or a reboot (a `/dev/v4l/by-id` link, an ALSA card's
    /// id), when the system gives one; `--write-config` prefers it to `node`.
    public var stableName: String?
    /// Driver, bus, formats and the like, for the table and `--json`.
    public var details: [String: String]
    /// The plugin's parameters that open this device, as `--write-config` writes them.
    public var parameters: [String: ConfigValue]
    /// Set when it is only a candidate (a serial port with a known GNSS vendor, a port that
    /// may hold a PN532): the configuration written for it is commented out.
    public var candidate: String?

    public init(capability: Capability, plugin: String, name: String, node: String, stableName: String? = nil,
                details: [String: String] = [:], parameters: [String: ConfigValue] = [:], candidate: String? = nil) {
        self.capability = capability
        self.plugin = plugin
        self.name = name
        self.node = node
        self.stableName = stableName
        self.details = details
        self.parameters = parameters
        self.candidate = candidate
    }
}

/// How far detection may go.
public struct DetectionOptions: Sendable {
    /// Probe devices that must be talked to, to be found (libnfc's serial scan sends bytes
    /// down every serial port): off unless asked.
    public var intrusive: Bool
    /// Where gpsd is asked for its receivers.
    public var gpsdHost: String
    public var gpsdPort: Int
    /// The longest a plugin waits for a service to answer (gpsd, fprintd).
    public var timeout: Duration

    public init(intrusive: Bool = false, gpsdHost: String = "localhost", gpsdPort: Int = 2947, timeout: Duration = .seconds(2)) {
        self.intrusive = intrusive
        self.gpsdHost = gpsdHost
        self.gpsdPort = gpsdPort
        self.timeout = timeout
    }
}

extension ConfigValue: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let value = try? container.decode(Bool.self) { self = .boolean(value) }
        else if let value = try? container.decode(Int.self) { self = .integer(value) }
        else if let value = try? container.decode(Double.self) { self = .float(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([ConfigValue].self) { self = .array(value) }
        else { self = .table(try container.decode([String: ConfigValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value), .dateTime(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .float(let value): try container.encode(value)
        case .boolean(let value): try container.encode(value)
        case .array(let values): try container.encode(values)
        case .table(let table): try container.encode(table)
        }
    }

    /// The value as TOML writes it (strings quoted and escaped).
    public var tomlLiteral: String {
        switch self {
        case .string(let value):
            var escaped = ""
            for scalar in value.unicodeScalars {
                switch scalar {
                case "\"": escaped += "\\\""
                case "\\": escaped += "\\\\"
                case "\n": escaped += "\\n"
                case "\t": escaped += "\\t"
                default:
                    if scalar.value < 0x20 || scalar.value == 0x7F {
                        let hex = String(scalar.value, radix: 16, uppercase: true)
                        escaped += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                    }
                    else { escaped.unicodeScalars.append(scalar) }
                }
            }
            return "\"" + escaped + "\""
        case .array(let values): return "[" + values.map(\.tomlLiteral).joined(separator: ", ") + "]"
        case .table(let table): return "{ " + table.keys.sorted().map { "\($0) = \(table[$0]!.tomlLiteral)" }.joined(separator: ", ") + " }"
        default: return description
        }
    }
}
