import FieldHAL

/// Req 29: what a responding kit does beside the banner — the haptic "warning" and the
/// soft alert sound, together. A kit without haptics or a speaker (or one that fails) does
/// the rest: the banner has already been shown, and nothing here can stop it.
public enum AlertFeedback {
    public static func announce(on kit: Kit) async {
        async let buzz: Void? = try? await kit.haptics().play(.warning)
        async let sound: Void? = try? await kit.speaker().play(.softAlert())
        _ = await (buzz, sound)
    }
}
