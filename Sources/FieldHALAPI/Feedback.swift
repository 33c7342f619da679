import FieldHAL

/// `GET /v1/camera/formats`: the formats, sizes and frame rates the camera offers.
public struct APICameraFormats: Sendable, Codable, Equatable {
    public var formats: [CameraFormat]

    public init(formats: [CameraFormat]) {
        self.formats = formats
    }
}

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

/// What was played: the pattern, its steps and how long it took, pauses included, as the
/// device played it (its theme's, for a named pattern; the same as `fieldhal haptics play
/// --json`).
public struct APIHapticsPlayed: Sendable, Codable, Equatable {
    public var pattern: String
    public var steps: Int
    public var milliseconds: Int

    public init(pattern: String, steps: Int, milliseconds: Int) {
        self.pattern = pattern
        self.steps = steps
        self.milliseconds = milliseconds
    }

    public init(_ name: String, _ played: HapticsPlayed) {
        self.init(pattern: name, steps: played.steps, milliseconds: played.milliseconds)
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
        self.init(sound: clip.name, milliseconds: Int(clip.duration.wholeMilliseconds))
    }
}

// MARK: Recording

/// `POST /v1/microphone/record`: a WAV recording of `durationMs` (1 to 3600000), as the body of
/// the answer (`audio/wav`); what was recorded, with its levels, in `FieldHAL-Recording`.
public struct APIAudioRecord: Sendable, Codable, Equatable {
    public var durationMs: Int
    /// 8000 to 192000; default 44100.
    public var sampleRate: Int?
    /// 1 to 8; default 1.
    public var channels: Int?

    public init(durationMs: Int, sampleRate: Int? = nil, channels: Int? = nil) {
        self.durationMs = durationMs
        self.sampleRate = sampleRate
        self.channels = channels
    }
}

/// `POST /v1/camera/record`: a Motion-JPEG AVI of `durationMs` (1 to 3600000) as the body of the
/// answer (`video/x-msvideo`); what was recorded in `FieldHAL-Recording`. The camera picks the
/// nearest size and rate it offers.
public struct APIVideoRecord: Sendable, Codable, Equatable {
    public var durationMs: Int
    /// 16 to 4096; default 640×480.
    public var width: Int?
    public var height: Int?
    /// 1 to 120; default 30.
    public var fps: Int?
    /// JPEG quality, 1 to 100, for frames FieldHAL encodes; default 80.
    public var quality: Int?

    public init(durationMs: Int, width: Int? = nil, height: Int? = nil, fps: Int? = nil, quality: Int? = nil) {
        self.durationMs = durationMs
        self.width = width
        self.height = height
        self.fps = fps
        self.quality = quality
    }
}

extension FieldHALAPI {
    /// The response header that carries a recording's report (`AudioRecording` or
    /// `VideoRecording` as JSON, `path` empty: the recording is the body).
    public static let recordingHeader = "FieldHAL-Recording"
}

// MARK: Biometrics

/// `POST /v1/biometrics/verify`: one scan within `timeoutMs` (1 to 300000; default 10000).
public struct APIBiometricVerify: Sendable, Codable, Equatable {
    public var timeoutMs: Int?

    public init(timeoutMs: Int? = nil) {
        self.timeoutMs = timeoutMs
    }
}

/// A scan's result: `match`, `no-match`, or `retry` with the sensor's reason.
public struct APIBiometricResult: Sendable, Codable, Equatable {
    public var result: String
    public var reason: String?

    public init(_ result: BiometricResult) {
        switch result {
        case .match: self.result = "match"
        case .noMatch: self.result = "no-match"
        case .retry(let why):
            self.result = "retry"
            reason = why.rawValue
        }
    }

    public var biometricResult: BiometricResult? {
        switch result {
        case "match": .match
        case "no-match": .noMatch
        case "retry": reason.flatMap(BiometricRetryReason.init(rawValue:)).map { .retry($0) }
        default: nil
        }
    }
}

/// `POST /v1/biometrics/enroll`: the finger (`right-index-finger` by default).
public struct APIBiometricEnroll: Sendable, Codable, Equatable {
    public var finger: String?

    public init(finger: String? = nil) {
        self.finger = finger
    }
}

/// One line of an enrollment's `application/x-ndjson` answer: `{"stage": 2}`, `{"retry":
/// "swipe-too-short"}`, `{"completed": true}`, or, if it fails on the way, `{"error": …}`.
public struct APIEnrollStep: Sendable, Codable, Equatable {
    public var stage: Int?
    public var retry: String?
    public var completed: Bool?
    public var error: APIProblem?

    public init(_ stage: EnrollStage) {
        switch stage {
        case .stagePassed(let number): self.stage = number
        case .retry(let reason): retry = reason.rawValue
        case .completed: completed = true
        }
    }

    public init(error: APIProblem) {
        self.error = error
    }

    public var enrollStage: EnrollStage? {
        if let stage { return .stagePassed(stage) }
        if let retry, let reason = BiometricRetryReason(rawValue: retry) { return .retry(reason) }
        if completed == true { return .completed }
        return nil
    }
}
