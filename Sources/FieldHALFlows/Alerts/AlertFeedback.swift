import FieldHAL

/// Req 29: what a responding kit does beside the banner — the haptic "warning" and the
/// soft alert sound, together. A kit without haptics or a speaker (or one that fails) does
/// the rest: the banner has already been shown, and nothing here can stop it.
public enum AlertFeedback {
    public static func announce(on kit: Kit) async {
        await announce(haptics: try? kit.haptics(), speaker: try? kit.speaker())
    }

    public static func announce(haptics: (any HapticsEngine)?, speaker: (any Speaker)?) async {
        async let buzz: HapticsPlayed? = try? await haptics?.play(.warning)
        async let sound: Void? = try? await speaker?.play(.softAlert())
        _ = await (buzz, sound)
    }
}
