/// A value from the configuration file, independent of the TOML library.
public indirect enum ConfigValue: Sendable, Equatable, CustomStringConvertible {
    case string(String)
    case integer(Int)
    case float(Double)
    case boolean(Bool)
    case array([ConfigValue])
    case table([String: ConfigValue])
    /// A TOML date or time; no FieldHAL parameter takes one, and its text is not kept (see `convert`).
    case dateTime(String)

    public var typeName: String {
        switch self {
        case .string: "string"
        case .integer: "integer"
        case .float: "floating-point number"
        case .boolean: "boolean"
        case .array: "array"
        case .table: "table"
        case .dateTime: "date-time"
        }
    }

    public var description: String {
        switch self {
        case .string(let value): "\"\(value)\""
        case .integer(let value): String(value)
        case .float(let value): String(value)
        case .boolean(let value): String(value)
        case .array(let values): "[" + values.map(\.description).joined(separator: ", ") + "]"
        case .table(let table): "{" + table.keys.sorted().map { "\($0) = \(table[$0]!)" }.joined(separator: ", ") + "}"
        case .dateTime(let value): value.isEmpty ? "value" : value
        }
    }
}

/// What a plugin declares for each parameter it takes, so the core can reject an unknown
/// key or a wrong type with the file and line, before any plugin code runs.
public struct ParameterSpec: Sendable {
    public indirect enum ValueType: Sendable, CustomStringConvertible {
        case string
        case integer
        /// An integer or a floating-point number.
        case number
        case boolean
        case strings
        /// An array of tables, each checked against the nested specs (a GPS track, a tag list).
        case records([ParameterSpec])

        public var description: String {
            switch self {
            case .string: "a string"
            case .integer: "an integer"
            case .number: "a number"
            case .boolean: "true or false"
            case .strings: "an array of strings"
            case .records: "an array of tables"
            }
        }
    }

    public var name: String
    public var type: ValueType
    public var help: String
    public var isRequired: Bool
    /// For numbers and integers: the values allowed (a latitude from -90 to 90). Every number
    /// must be finite whether or not a range is given.
    public var range: ClosedRange<Double>?

    public init(_ name: String, _ type: ValueType, required: Bool = false, range: ClosedRange<Double>? = nil, help: String) {
        self.name = name
        self.type = type
        self.help = help
        self.isRequired = required
        self.range = range
    }
}

/// A capability's parameters, checked against its plugin's specs. The accessors return
/// `nil` for absent keys; types were checked when the configuration was loaded.
public struct PluginParameters: Sendable, Equatable {
    public var values: [String: ConfigValue]

    public init(_ values: [String: ConfigValue] = [:]) {
        self.values = values
    }

    public func string(_ key: String) -> String? {
        if case .string(let value)? = values[key] { return value }
        return nil
    }

    public func integer(_ key: String) -> Int? {
        if case .integer(let value)? = values[key] { return value }
        return nil
    }

    public func number(_ key: String) -> Double? {
        switch values[key] {
        case .integer(let value)?: Double(value)
        case .float(let value)?: value
        default: nil
        }
    }

    public func boolean(_ key: String) -> Bool? {
        if case .boolean(let value)? = values[key] { return value }
        return nil
    }

    public func strings(_ key: String) -> [String]? {
        guard case .array(let items)? = values[key] else { return nil }
        return items.compactMap { if case .string(let value) = $0 { value } else { nil } }
    }

    public func records(_ key: String) -> [PluginParameters]? {
        guard case .array(let items)? = values[key] else { return nil }
        return items.compactMap { if case .table(let table) = $0 { PluginParameters(table) } else { nil } }
    }
}
