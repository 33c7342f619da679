import FieldHAL
// The protocol's values (JSONValue, versions) are part of the host's API.
@_exported import FieldHALPluginProtocol
import Foundation

/// What an external plugin says about itself in its `plugin.json`, before anything runs:
/// the same facts as a built-in plugin's `PluginDescriptor` (name, summary, capabilities and
/// their parameters), so that a configuration naming it is checked as strictly, plus what
/// the host needs to start it (the executable, the protocol version it speaks).
///
/// ```json
/// {
///   "name": "nmea-serial",
///   "version": "1.0.0",
///   "summary": "GNSS receivers read straight from their serial port (NMEA 0183)",
///   "protocol": { "major": 1, "minor": 0 },
///   "executable": "nmea-serial.py",
///   "capabilities": {
///     "gps": { "parameters": [
///       { "name": "device", "type": "string", "required": true, "help": "the receiver's tty" }
///     ] }
///   }
/// }
/// ```
public struct PluginManifest: Sendable, Equatable {
    public struct Parameter: Sendable, Equatable {
        public var name: String
        public var type: String
        public var required: Bool
        public var help: String
        /// For `records`: the fields of each table.
        public var fields: [Parameter]
    }

    public var name: String
    public var version: String
    public var summary: String
    public var protocolVersion: PluginProtocol.Version
    /// Absolute: resolved against the manifest's directory when given relative.
    public var executable: String
    public var capabilities: [Capability: [Parameter]]
    /// The manifest file this came from.
    public var file: String

    /// The parameter types a manifest may use, as `ParameterSpec.ValueType`s.
    static let typeNames = ["string", "integer", "number", "boolean", "strings", "records"]

    /// Reads and checks `file`. Every problem is a `malformedData` error naming the file
    /// and the field, and saying what to write instead.
    public static func load(_ path: String) throws(FieldHALError) -> PluginManifest {
        // Absolute, so that the executable it names is found from any working directory.
        let file = ((path.hasPrefix("/") ? path : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(path)) as NSString).standardizingPath
        // Trusted as code before a byte of it is read: the manifest names what the daemon runs.
        try PluginTrust.check(file, what: "plugin manifest")
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: file))
        } catch {
            throw FieldHALError(.io, subject: file, detail: "cannot read the plugin manifest: \((error as NSError).localizedDescription)")
        }
        return try parse(data, file: file)
    }

    /// Checks a manifest's text; `file` names it in errors and anchors a relative executable.
    public static func parse(_ data: Data, file: String) throws(FieldHALError) -> PluginManifest {
        guard data.count <= 256 * 1024 else {
            throw FieldHALError(.malformedData, subject: file, detail: "the manifest is \(data.count) bytes; a manifest is at most 256 KiB")
        }
        let object: JSONValue
        do {
            object = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw FieldHALError(.malformedData, subject: file, detail: "not JSON: \(PluginManifest.describe(error))",
                                advice: "python3 -m json.tool \(file) shows where")
        }
        let reader = FieldReader(file: file, path: "")
        guard let top = object.object else { throw reader.problem("the manifest must be a JSON object") }

        let name = try reader.string(top, "name")
        guard name.range(of: "^[a-z0-9][a-z0-9._-]{0,63}$", options: .regularExpression) != nil else {
            throw reader.problem("name \"\(name)\" must be 1–64 characters of a–z, 0–9, '.', '_' or '-', starting with a letter or digit",
                                 at: "name")
        }
        let version = try reader.string(top, "version")
        let summary = try reader.string(top, "summary")

        guard let protocolObject = top["protocol"]?.object else {
            throw reader.problem("\"protocol\" must be an object like {\"major\": 1, \"minor\": 0}", at: "protocol")
        }
        let protocolReader = reader.nested("protocol")
        let protocolVersion = PluginProtocol.Version(major: try protocolReader.integer(protocolObject, "major"),
                                                     minor: try protocolReader.integer(protocolObject, "minor"))

        let executableText = try reader.string(top, "executable")
        let directory = (file as NSString).deletingLastPathComponent
        let executable = executableText.hasPrefix("/") ? executableText
            : ((directory.isEmpty ? "." : directory) as NSString).appendingPathComponent(executableText)

        guard let capabilityObject = top["capabilities"]?.object, !capabilityObject.isEmpty else {
            throw reader.problem("\"capabilities\" must be an object naming at least one capability ("
                                 + Capability.allCases.map(\.rawValue).joined(separator: ", ") + ")", at: "capabilities")
        }
        var capabilities: [Capability: [Parameter]] = [:]
        for key in capabilityObject.keys.sorted() {
            let capabilityReader = reader.nested("capabilities." + key)
            guard let capability = Capability(rawValue: key) else {
                throw capabilityReader.problem("no capability \"\(key)\"; the capabilities are "
                                               + Capability.allCases.map(\.rawValue).joined(separator: ", "))
            }
            guard let entry = capabilityObject[key]?.object else {
                throw capabilityReader.problem("must be an object, like {\"parameters\": []}")
            }
            capabilities[capability] = try capabilityReader.parameters(entry["parameters"] ?? .array([]))
        }
        // Versions this host cannot use are refused here, so that `fieldhal plugins` lists
        // the problem and no kit opens the plugin: another major, or a capability declared
        // with a protocol older than the one it is served from.
        if let refusal = PluginProtocol.refusal(of: protocolVersion, plugin: name) {
            throw FieldHALError(refusal.kind, subject: "\(file): protocol", detail: "the plugin \(refusal.detail)", advice: refusal.advice)
        }
        for capability in capabilities.keys.sorted() where protocolVersion < PluginProtocol.since(capability) {
            let since = PluginProtocol.since(capability)
            throw FieldHALError(.unsupported, subject: "\(file): capabilities.\(capability.rawValue)",
                                detail: "\(capability.rawValue) is served from plugin protocol \(since) on; the manifest says \(protocolVersion)",
                                advice: "declare (and speak) protocol \(since) or later, or leave \(capability.rawValue) out")
        }
        return PluginManifest(name: name, version: version, summary: summary, protocolVersion: protocolVersion,
                              executable: executable, capabilities: capabilities, file: file)
    }

    /// A decoding error as one line: where in the text, and what.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case .dataCorrupted(let context): return context.underlyingError.map { "\($0)" } ?? context.debugDescription
        default: return "\(error)"
        }
    }

    /// The parameter specs a configuration section is checked against.
    public var parameterSpecs: [Capability: [ParameterSpec]] {
        capabilities.mapValues { $0.map(\.spec) }
    }
}

extension PluginManifest.Parameter {
    var spec: ParameterSpec {
        let valueType: ParameterSpec.ValueType = switch type {
        case "integer": .integer
        case "number": .number
        case "boolean": .boolean
        case "strings": .strings
        case "records": .records(fields.map(\.spec))
        default: .string
        }
        return ParameterSpec(name, valueType, required: required, help: help)
    }
}

/// Reads a manifest's fields, each problem naming where it is (`capabilities.gps.parameters[0].type`).
private struct FieldReader {
    let file: String
    let path: String

    func nested(_ key: String) -> FieldReader {
        FieldReader(file: file, path: path.isEmpty ? key : path + "." + key)
    }

    func problem(_ detail: String, at key: String? = nil) -> FieldHALError {
        let place = key.map { path.isEmpty ? $0 : path + "." + $0 } ?? path
        return FieldHALError(.malformedData, subject: place.isEmpty ? file : "\(file): \(place)", detail: detail,
                             advice: "docs/plugins.md describes plugin.json")
    }

    func string(_ object: [String: JSONValue], _ key: String) throws(FieldHALError) -> String {
        guard let value = object[key] else { throw problem("missing; it must be a string", at: key) }
        guard let text = value.string, !text.isEmpty else { throw problem("must be a non-empty string", at: key) }
        return text
    }

    func integer(_ object: [String: JSONValue], _ key: String) throws(FieldHALError) -> Int {
        guard let value = object[key]?.integer, value >= 0, value <= 1_000_000 else {
            throw problem("must be a whole number, 0 or more", at: key)
        }
        return Int(value)
    }

    func parameters(_ value: JSONValue) throws(FieldHALError) -> [PluginManifest.Parameter] {
        guard let list = value.array else { throw problem("\"parameters\" must be an array", at: "parameters") }
        var seen = Set<String>()
        var result: [PluginManifest.Parameter] = []
        for (index, item) in list.enumerated() {
            let here = FieldReader(file: file, path: (path.isEmpty ? "" : path + ".") + "parameters[\(index)]")
            guard let entry = item.object else { throw here.problem("must be an object with name, type and help") }
            let name = try here.string(entry, "name")
            guard name.range(of: "^[a-z][a-z0-9_]{0,63}$", options: .regularExpression) != nil else {
                throw here.problem("\"\(name)\" is not a configuration key (a–z, 0–9 and '_', starting with a letter)", at: "name")
            }
            guard seen.insert(name).inserted else { throw here.problem("\"\(name)\" is declared twice", at: "name") }
            let type = try here.string(entry, "type")
            guard PluginManifest.typeNames.contains(type) else {
                throw here.problem("no parameter type \"\(type)\"; the types are " + PluginManifest.typeNames.joined(separator: ", "), at: "type")
            }
            let help = try here.string(entry, "help")
            var required = false
            if let flag = entry["required"] {
                guard let value = flag.bool else { throw here.problem("must be true or false", at: "required") }
                required = value
            }
            var fields: [PluginManifest.Parameter] = []
            if type == "records" {
                guard let nested = entry["fields"] else { throw here.problem("a records parameter lists its \"fields\"", at: "fields") }
                fields = try here.nested("fields").parameters(nested)
            }
            result.append(.init(name: name, type: type, required: required, help: help, fields: fields))
        }
        return result
    }
}

extension PluginManifest {
    /// A manifest's JSON for a plugin described in Swift (`fieldhal plugin manifest`): the
    /// descriptor's capabilities and parameters, the executable that serves it (relative to
    /// the manifest's directory, or absolute). `load` reads back what this writes.
    public static func json(for descriptor: PluginDescriptor, name: String, version: String, executable: String) -> JSONValue {
        func parameter(_ spec: ParameterSpec) -> JSONValue {
            var entry: [String: JSONValue] = ["name": .string(spec.name), "help": .string(spec.help)]
            switch spec.type {
            case .string: entry["type"] = .string("string")
            case .integer: entry["type"] = .string("integer")
            case .number: entry["type"] = .string("number")
            case .boolean: entry["type"] = .string("boolean")
            case .strings: entry["type"] = .string("strings")
            case .records(let fields):
                entry["type"] = .string("records")
                entry["fields"] = .array(fields.map(parameter))
            }
            if spec.isRequired { entry["required"] = .bool(true) }
            return .object(entry)
        }
        let capabilities = descriptor.capabilities.map { capability, specs in
            (capability.rawValue, JSONValue.object(["parameters": .array(specs.map(parameter))]))
        }
        return .object([
            "name": .string(name), "version": .string(version), "summary": .string(descriptor.summary),
            "protocol": PluginProtocol.version.json,
            "executable": .string(executable),
            "capabilities": .object(Dictionary(uniqueKeysWithValues: capabilities)),
        ])
    }
}
