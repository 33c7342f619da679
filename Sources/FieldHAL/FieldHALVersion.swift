/// FieldHAL's version, as the CLI, the plugin manifests, the plugin processes' handshake and
/// Transrify's device info give it.
public enum FieldHALVersion {
    public static let current = "0.3.0"
}
