/// A configuration file written from what `fieldhal detect` found: per capability, the
/// first device found that is not only a candidate, each line commented with what the
/// device is; the others as commented alternatives; a capability with nothing found as a
/// comment. `KitConfiguration.parse` accepts what this writes (the detect command checks).
public enum DetectedConfiguration {
    public static func text(for devices: [DetectedDevice], header: String) -> String {
        var lines = header.split(separator: "\n", omittingEmptySubsequences: false).map { "# " + $0 }
        for capability in Capability.allCases {
            let found = devices.filter { $0.capability == capability }
            lines.append("")
            guard let chosen = found.first(where: { $0.candidate == nil }) ?? found.first else {
                lines.append("# [\(capability)]: nothing found")
                continue
            }
            let comment = chosen.candidate == nil ? "" : "# "
            if let reason = chosen.candidate { lines.append("# A candidate only: \(reason)") }
            lines.append("# \(describe(chosen))")
            lines.append("\(comment)[\(capability)]")
            lines.append("\(comment)plugin = \(ConfigValue.string(chosen.plugin).tomlLiteral)")
            for key in chosen.parameters.keys.sorted() {
                lines.append("\(comment)\(key) = \(chosen.parameters[key]!.tomlLiteral)")
            }
            for other in found where other != chosen {
                let parameters = other.parameters.keys.sorted().map { "\($0) = \(other.parameters[$0]!.tomlLiteral)" }
                lines.append("# or \(describe(other)): plugin = \(ConfigValue.string(other.plugin).tomlLiteral)"
                             + (parameters.isEmpty ? "" : ", " + parameters.joined(separator: ", ")))
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `vivid (/dev/video0; driver vivid, bus platform:vivid-000)`, on one line.
    static func describe(_ device: DetectedDevice) -> String {
        let details = device.details.keys.sorted().map { "\($0) \(device.details[$0]!)" }
        let place = [device.node] + details
        return "\(device.name) (\(place.joined(separator: "; ")))".replacingNewlines
    }
}

private extension String {
    /// A device's name is the driver's text: never let it end the comment line.
    var replacingNewlines: String { String(map { $0 == "\n" || $0 == "\r" ? " " : $0 }) }
}
