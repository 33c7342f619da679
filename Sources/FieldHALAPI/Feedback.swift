import FieldHAL

/// `POST /v1/haptics/play`: a named pattern (`success`, `warning`, `error`, `light`,
/// `medium`, `heavy`), played to its end.
public struct APIHapticsPlay: Sendable, Codable, Equatable {
    public var pattern: String

    public init(pattern: String) {
        self.pattern = pattern
    }

    /// The pattern, or what is wrong with the name.
    public func named() throws -> HapticPattern {
        guard let named = HapticPattern.namedPatterns[pattern] else {
            throw FieldHALError(.invalidArgument, subject: "pattern", detail: "no pattern \"\(pattern)\"",
                                advice: "use one of \(HapticPattern.namedPatterns.keys.sorted().joined(separator: ", "))")
        }
        return named
    }
}

/// What was played: the pattern, its steps and how long it took, pauses included (the same
/// as `fieldhal haptics play --json`).
public struct APIHapticsPlayed: Sendable, Codable, Equatable {
    public var pattern: String
    public var steps: Int
    public var milliseconds: Int

    public init(pattern: String, steps: Int, milliseconds: Int) {
        self.pattern = pattern
        self.steps = steps
        self.milliseconds = milliseconds
    }

    public init(_ name: String, _ pattern: HapticPattern) {
        self.init(pattern: name, steps: pattern.steps.count,
                  milliseconds: pattern.steps.reduce(0) { $0 + $1.durationMilliseconds + $1.pauseMilliseconds })
    }
}

/// `POST /v1/speaker/play`: a named sound (`soft-alert`), played to its end.
public struct APISoundPlay: Sendable, Codable, Equatable {
    public var sound: String

    public init(sound: String) {
        self.sound = sound
    }

    public func clip() throws -> SoundClip {
        guard let clip = SoundClip.named(sound) else {
            throw FieldHALError(.invalidArgument, subject: "sound", detail: "no sound \"\(sound)\"",
                                advice: "use one of \(SoundClip.names.joined(separator: ", "))")
        }
        return clip
    }
}

/// What was played (the same as `fieldhal sound play --json`).
public struct APISoundPlayed: Sendable, Codable, Equatable {
    public var sound: String
    public var milliseconds: Int

    public init(sound: String, milliseconds: Int) {
        self.sound = sound
        self.milliseconds = milliseconds
    }

    public init(_ clip: SoundClip) {
        self.init(sound: clip.name, milliseconds: Int(clip.duration.components.seconds * 1000
                                                       + clip.duration.components.attoseconds / 1_000_000_000_000_000))
    }
}
