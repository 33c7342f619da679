import FieldHAL

/// The fprintd backend: fingerprint sensors through fprintd on the system D-Bus, reached
/// with fprintd's own tools (fprintd-list, fprintd-verify, fprintd-enroll), so no D-Bus
/// library is linked. Built with the `Fprintd` trait.
public enum FprintdPlugin {
    #if Fprintd
    public static let descriptor: PluginDescriptor? = PluginDescriptor(
        name: "fprintd",
        summary: "fingerprint sensors through fprintd (D-Bus, via the fprintd-* tools)",
        capabilities: [.biometrics: parameters],
        open: { _, parameters, _ in
            .biometrics(try await FprintdAuthenticator.open(try settings(from: parameters)))
        },
        detect: { options in await FprintdDetection.devices(options) }
    )
    #else
    public static let descriptor: PluginDescriptor? = nil
    #endif

    static let parameters: [ParameterSpec] = [
        ParameterSpec("user", .string, help: "whose prints to verify and enroll (default: the user fieldhal runs as)"),
        ParameterSpec("finger", .string, help: "the finger to verify, such as right-index-finger (default: any enrolled)"),
        ParameterSpec("bus_address", .string, help: "a D-Bus address to use as the system bus (default: the system bus)"),
        ParameterSpec("tools_directory", .string, help: "where fprintd-list/-verify/-enroll live (default /usr/bin)"),
    ]

    #if Fprintd
    static func settings(from parameters: PluginParameters) throws -> FprintdAuthenticator.Settings {
        var settings = FprintdAuthenticator.Settings()
        if let user = parameters.string("user") { settings.user = user }
        if let finger = parameters.string("finger") {
            guard let known = Finger(rawValue: finger) else {
                throw FieldHALError(.invalidArgument, subject: "fprintd plugin",
                                    detail: "finger: \"\(finger)\" is not one of \(Finger.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            settings.finger = known
        }
        settings.busAddress = parameters.string("bus_address")
        if let directory = parameters.string("tools_directory") { settings.toolsDirectory = directory }
        return settings
    }
    #endif
}
