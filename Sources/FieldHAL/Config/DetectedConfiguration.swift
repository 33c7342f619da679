/// A configuration file written from what `fieldhal detect` found: per capability, every
/// device found that is not only a candidate, each commented with what the device is (one
/// as a plain `[camera]`, two or more each under a name: `[camera.video0]`,
/// `[camera.video2]`, the first the default); candidates as commented alternatives; a
/// capability with nothing found as a comment. `KitConfiguration.parse` accepts what this
/// writes (the detect command checks).
public enum DetectedConfiguration {
    public static func text(for devices: [DetectedDevice], header: String) -> String {
        var lines = header.split(separator: "\n", omittingEmptySubsequences: false).map { "# " + $0 }
        for capability in Capability.allCases {
            let found = devices.filter { $0.capability == capability }
            lines.append("")
            let usable = found.filter { $0.candidate == nil }
            if usable.count > 1 {
                lines.append("# \(usable.count) found: each under a name (rename them freely); the first is the default")
                var names: Set<String> = []
                for device in usable {
                    let name = deviceName(for: device, taken: names)
                    names.insert(name)
                    lines.append("# \(describe(device))")
                    lines.append("[\(capability).\(name)]")
                    lines.append("plugin = \(ConfigValue.string(device.plugin).tomlLiteral)")
                    for key in device.parameters.keys.sorted() {
                        lines.append("\(key) = \(device.parameters[key]!.tomlLiteral)")
                    }
                    lines.append("")
                }
                lines.removeLast()
                for other in found where other.candidate != nil { lines.append(alternative(other)) }
                continue
            }
            guard let chosen = usable.first ?? found.first else {
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
            for other in found where other != chosen { lines.append(alternative(other)) }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `# or vivid (/dev/video2): plugin = "v4l2", device = "/dev/video2"`.
    static func alternative(_ device: DetectedDevice) -> String {
        let parameters = device.parameters.keys.sorted().map { "\($0) = \(device.parameters[$0]!.tomlLiteral)" }
        return "# or \(describe(device)): plugin = \(ConfigValue.string(device.plugin).tomlLiteral)"
            + (parameters.isEmpty ? "" : ", " + parameters.joined(separator: ", "))
    }

    /// A device's name in the written file, from where it is now: `/dev/video2` → `video2`,
    /// `localhost:2947` → `localhost-2947`; `device2`, `device3`… when that gives nothing
    /// usable or is taken.
    static func deviceName(for device: DetectedDevice, taken: Set<String>) -> String {
        let last = device.node.split(separator: "/").last.map(String.init) ?? ""
        var name = ""
        for character in last {
            let allowed = character.isASCII && (character.isLetter || character.isNumber)
            if allowed { name.append(character) } else if !name.isEmpty, name.last != "-" { name.append("-") }
        }
        while name.last == "-" { name.removeLast() }
        name = String(name.prefix(32))
        if KitConfiguration.problem(withDeviceName: name) == nil, !taken.contains(name) { return name }
        var number = taken.count + 1
        while taken.contains("device\(number)") { number += 1 }
        return "device\(number)"
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
