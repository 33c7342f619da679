import FieldHAL

/// Devices by name (protocol 1.6): one plugin process serves every device a kit opens from
/// the plugin, several of a capability among them (a bench of readers on one process).
/// `open` names the device with a handle the host chooses, unique in the process; every
/// request, notification and `close` for that device carries it as `"device"`. A plugin may
/// answer `open` with the device's `identity` (vendor, model, serial, a stable link), which
/// the kit shows and follows as an in-process backend's.
extension PluginProtocol {
    public static let namedDevices = Version(major: 1, minor: 6)

    /// `parameters` with the device's handle added (1.6), or as they are (no handle: an
    /// older plugin, which has one device per capability in a process).
    public static func naming(_ parameters: JSONValue, device handle: String?) -> JSONValue {
        guard let handle else { return parameters }
        var fields = parameters.object ?? [:]
        fields["device"] = .string(handle)
        return .object(fields)
    }

    /// The handle a request names, or nil (a host older than 1.6).
    public static func device(in parameters: JSONValue) -> String? {
        parameters["device"]?.string
    }

    /// An identity as `open`'s answer carries it: the fields known, strings.
    public static func value(of identity: DeviceIdentity) -> JSONValue {
        var fields: [String: JSONValue] = [:]
        if let vendor = identity.vendor { fields["vendor"] = .string(vendor) }
        if let model = identity.model { fields["model"] = .string(model) }
        if let serial = identity.serial { fields["serial"] = .string(serial) }
        if let link = identity.link { fields["link"] = .string(link) }
        return .object(fields)
    }

    /// `open`'s `identity` read back: nil when there is none or it names nothing. A field
    /// that is not a string is a fault of the plugin's.
    public static func identity(from value: JSONValue?, plugin: String) throws(FieldHALError) -> DeviceIdentity? {
        guard let value, value != .null else { return nil }
        guard let fields = value.object else {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "its open answer's \"identity\" is not an object",
                                advice: "docs/plugin-protocol.md, Devices by name")
        }
        for (key, field) in fields where ["vendor", "model", "serial", "link"].contains(key) && field.string == nil {
            throw FieldHALError(.protocolError, subject: "plugin \(plugin)", detail: "its open answer's identity.\(key) is not a string",
                                advice: "docs/plugin-protocol.md, Devices by name")
        }
        let identity = DeviceIdentity(vendor: fields["vendor"]?.string, model: fields["model"]?.string,
                                      serial: fields["serial"]?.string, link: fields["link"]?.string)
        return identity == DeviceIdentity() ? nil : identity
    }
}
