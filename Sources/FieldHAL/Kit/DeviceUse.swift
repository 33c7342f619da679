/// One use of a device through the kit's API — a pattern played, a clip, a verification, a
/// still, a recording, a tag written — and what the device answered, how long it took, or
/// how it failed.
///
/// The daemon says these as `use` events to a client that asks for them (`fieldhal record`
/// keeps them in a trace), and the `replay` plugin answers with them: a replayed sensor
/// says "no match" where the field's did, after as long. Only uses that come through the
/// API: the kit's own work (its duress capture, its alert's buzz) is never one, so a duress
/// session's uses are a normal session's.
public struct DeviceUse: Sendable, Equatable, Codable {
    public enum Request: String, Sendable, Codable, CaseIterable {
        case hapticsPlay = "haptics.play"
        case speakerPlay = "speaker.play"
        case biometricsAvailability = "biometrics.availability"
        case biometricsVerify = "biometrics.verify"
        case cameraPhoto = "camera.photo"
        case cameraRecord = "camera.record"
        case microphoneRecord = "microphone.record"
        case nfcWrite = "nfc.write"

        public var capability: Capability {
            switch self {
            case .hapticsPlay: .haptics
            case .speakerPlay: .speaker
            case .biometricsAvailability, .biometricsVerify: .biometrics
            case .cameraPhoto, .cameraRecord: .camera
            case .microphoneRecord: .microphone
            case .nfcWrite: .nfcReader
            }
        }
    }

    /// A still, by reference: what was taken, not its pixels (a trace is a log, not a store
    /// of photographs; a replayed camera gives a still of the same size).
    public struct Still: Sendable, Equatable, Codable {
        public var width: Int
        public var height: Int
        public var bytes: Int

        public init(width: Int, height: Int, bytes: Int) {
            self.width = width
            self.height = height
            self.bytes = bytes
        }
    }

    public var request: Request
    /// The device's name in the kit (`default`, `front`).
    public var device: String
    /// What was asked for by name: the pattern or the sound.
    public var asked: String?
    /// From the request reaching the device to its answer.
    public var milliseconds: Int
    /// What a haptics device said it played.
    public var played: HapticsPlayed?
    /// A verification's outcome: `match`, `no-match` or `retry`, with the retry's reason.
    public var result: String?
    public var reason: String?
    public var availability: BiometricAvailability?
    public var still: Still?
    /// A recording, by reference: what it held (its length, size, levels), not its file.
    public var video: VideoRecording?
    public var audio: AudioRecording?
    /// The tag a write left, as read back.
    public var tag: NFCTag?
    /// How the device failed, when it did.
    public var failure: FieldHALError?

    public init(_ request: Request, device: String, asked: String? = nil, milliseconds: Int) {
        self.request = request
        self.device = device
        self.asked = asked
        self.milliseconds = milliseconds
    }

    /// The verification's outcome as `result` and `reason` say it.
    public var biometricResult: BiometricResult? {
        switch result {
        case "match": .match
        case "no-match": .noMatch
        case "retry": .retry(reason.flatMap(BiometricRetryReason.init(rawValue:)) ?? .retryScan)
        default: nil
        }
    }

    public mutating func setBiometricResult(_ outcome: BiometricResult) {
        switch outcome {
        case .match: result = "match"
        case .noMatch: result = "no-match"
        case .retry(let why):
            result = "retry"
            reason = why.rawValue
        }
    }
}
