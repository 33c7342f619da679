import ArgumentParser
import FieldHAL
import FieldHALMedia
import FieldHALComposition
import FieldHALAPI
import FieldHALCommandLine
import Foundation

struct CameraCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "camera", abstract: "Capture stills and video.",
                                                    subcommands: [Snap.self, Record.self, Formats.self])

    struct Snap: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "snap", abstract: "Capture one still to a JPEG file.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var target: DeviceOption
        @Option(name: .shortAndLong, help: "The JPEG file to write.") var output: String
        @Option(help: "Width in pixels.") var width = 640
        @Option(help: "Height in pixels.") var height = 480
        @Option(help: "JPEG quality, 1–100.") var quality = 85

        struct Report: Encodable { let path: String; let width: Int; let height: Int; let bytes: Int; let capturedAt: Date }

        func execute(_ environment: Environment) async throws {
            let request = PhotoRequest(width: width, height: height, quality: quality)
            // Through the daemon when it runs (it holds the camera: during its evidence video
            // the still comes from the recording), else here.
            var photo = try await environment.throughDaemon { daemon -> Photo in
                let jpeg = try await daemon.photo(width: width, height: height, quality: quality, device: target.device)
                let size = JPEGSize.of(jpeg) ?? (width, height)
                return Photo(jpeg: jpeg, width: size.width, height: size.height, capturedAt: Date())
            }
            if photo == nil {
                photo = try await environment.withKit(for: .camera) { kit in try await kit.camera(named: target.device).captureStill(request) }
            }
            guard let photo else { return }
            try output.writeAtomically(photo.jpeg)
            let report = Report(path: output.absolutePath, width: photo.width, height: photo.height, bytes: photo.jpeg.count,
                                capturedAt: photo.capturedAt)
            try Output.emit(report, json: global.json) { "\(report.path): \(report.width)x\(report.height) JPEG, \(report.bytes) bytes" }
        }
    }
}

extension CameraCommand {
    struct Record: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "record",
            abstract: "Record video to a Motion-JPEG AVI file.",
            discussion: "The camera picks the nearest size and rate it offers; the report says what it recorded. "
                + "Frames are streamed to disk; the file appears only when the recording is complete.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var target: DeviceOption
        @Option(help: "Length of the recording in seconds.") var seconds: Double
        @Option(name: .shortAndLong, help: "The AVI file to write.") var output: String
        @Option(help: "Width in pixels.") var width = 640
        @Option(help: "Height in pixels.") var height = 480
        @Option(help: "Frames per second to ask the camera for.") var fps = 30
        @Option(help: "JPEG quality, 1–100, for frames FieldHAL encodes.") var quality = 80
        @OptionGroup var progress: ProgressOptions

        func execute(_ environment: Environment) async throws {
            let request = VideoRequest(duration: try duration(seconds: seconds, option: "--seconds"), width: width, height: height,
                                       framesPerSecond: fps, quality: quality)
            let path = output.absolutePath
            // A running daemon holds the camera (a still meanwhile is this recording's frame).
            let asked = APIVideoRecord(durationMs: Int((seconds * 1000).rounded()), width: width, height: height, fps: fps, quality: quality)
            let video = try await ProgressLine.whileRunning("recording video", seconds: seconds, json: global.json, asked: progress.progress) {
                if let served = try await environment.throughDaemon({ try await $0.recordVideo(asked, to: path, device: target.device) }) { return served }
                return try await environment.withKit(for: .camera) { kit in try await kit.camera(named: target.device).recordVideo(request, to: path) }
            }
            try Output.emit(video, json: global.json) {
                var line = String(format: "%@: %dx%d Motion-JPEG AVI, %d frames in %.2f s (%.1f fps), %d bytes", video.path,
                                  video.width, video.height, video.frames, video.durationSeconds, video.framesPerSecond, video.bytes)
                if video.droppedFrames > 0 { line += ", \(video.droppedFrames) frames dropped" }
                if video.stoppedAtSizeLimit { line += " (stopped at the AVI size limit, \(MJPEGAVIWriter.sizeLimit >> 30) GiB)" }
                if video.stoppedForDiskSpace { line += " (stopped early: the disk is nearly full; the clip up to there is kept)" }
                return line
            }
            if let failure = video.endedEarly { throw recordingEndedEarly(failure, after: video.durationSeconds, keptIn: video.path) }
        }
    }

    struct Formats: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "formats", abstract: "List the formats, sizes and frame rates the camera offers.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var target: DeviceOption

        func execute(_ environment: Environment) async throws {
            // With a daemon, the camera it holds (opening it here would find it busy).
            let formats: [CameraFormat]
            if let served = try await environment.throughDaemon({ try await $0.cameraFormats(device: target.device) }) {
                formats = served
            } else {
                formats = try await environment.withKit(for: .camera) { kit in try await kit.camera(named: target.device).formats() }
            }
            try Output.emit(formats, json: global.json) {
                formats.map { format in
                    let rates = format.framesPerSecond.map { $0 == $0.rounded() ? String(Int($0)) : String($0) }.joined(separator: ", ")
                    return "\(format.pixelFormat) \(format.width)x\(format.height)" + (rates.isEmpty ? "" : " @ \(rates) fps")
                }.joined(separator: "\n")
            }
        }
    }
}

struct MicCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "mic", abstract: "Record sound.", subcommands: [Record.self])

    struct Record: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "record", abstract: "Record to a WAV file and report its levels.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var target: DeviceOption
        @Option(help: "Length of the recording in seconds.") var seconds: Double
        @Option(name: .shortAndLong, help: "The WAV file to write.") var output: String
        @Option(help: "Sample rate in Hz.") var rate = 44_100
        @Option(help: "Number of channels.") var channels = 1
        @OptionGroup var progress: ProgressOptions

        func execute(_ environment: Environment) async throws {
            let request = RecordingRequest(duration: try duration(seconds: seconds, option: "--seconds"), sampleRate: rate, channels: channels)
            let path = output.absolutePath
            let asked = APIAudioRecord(durationMs: Int((seconds * 1000).rounded()), sampleRate: rate, channels: channels)
            let recording = try await ProgressLine.whileRunning("recording sound", seconds: seconds, json: global.json, asked: progress.progress) {
                if let served = try await environment.throughDaemon({ try await $0.recordAudio(asked, to: path, device: target.device) }) { return served }
                return try await environment.withKit(for: .microphone) { kit in try await kit.microphone(named: target.device).record(request, to: path) }
            }
            try Output.emit(recording, json: global.json) {
                String(format: "%@: %.2f s, %d Hz, %d channel(s), peak %.1f dBFS, RMS %.1f dBFS", recording.path,
                       recording.durationSeconds, recording.sampleRate, recording.channels, recording.peakDBFS, recording.rmsDBFS)
            }
            if let failure = recording.endedEarly {
                throw recordingEndedEarly(failure, after: recording.durationSeconds, keptIn: recording.path)
            }
        }
    }
}

struct SoundCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sound", abstract: "Play the alert sounds.", subcommands: [SoundPlayCommand.self])
}

struct HapticsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "haptics", abstract: "Play vibration patterns.", subcommands: [HapticsPlayCommand.self])
}

struct BioCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "bio", abstract: "Fingerprint sensor.",
                                                    subcommands: [BioStatusCommand.self, Verify.self, Enroll.self])

    struct Verify: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "verify",
            abstract: "Wait for a finger and compare it with the enrolled prints.",
            discussion: "Exits 0 on a match, 1 on no match, 75 when the scan must be retried or timed out.")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var target: DeviceOption
        @Option(help: "Seconds to wait for a finger.") var timeout: Double = 10

        struct Report: Encodable { let result: String }

        func execute(_ environment: Environment) async throws {
            let wait = try duration(seconds: timeout, option: "--timeout")
            var scanned = try await environment.throughDaemon { try await $0.verifyFinger(timeout: wait, device: target.device) }
            if scanned == nil {
                scanned = try await environment.withKit(for: .biometrics) { kit in try await kit.biometrics(named: target.device).verify(timeout: wait) }
            }
            guard let result = scanned else { return }
            let report: Report = switch result {
            case .match: Report(result: "match")
            case .noMatch: Report(result: "no-match")
            case .retry(let reason): Report(result: "retry: \(reason.rawValue)")
            }
            try Output.emit(report, json: global.json) { report.result }
            switch result {
            case .match: return
            case .noMatch: throw ExitCode(1)
            case .retry: throw ExitCode(75)
            }
        }
    }

    struct Enroll: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "enroll",
            abstract: "Enroll a finger: touch the sensor until it reports the enrollment complete.",
            discussion: "Prints each stage as the sensor reports it. Fingers: \(Finger.allCases.map(\.rawValue).joined(separator: ", ")).")
        @OptionGroup var global: GlobalOptions
        @OptionGroup var target: DeviceOption
        @Option(help: "The finger to enroll.") var finger: String = Finger.rightIndex.rawValue

        func validate() throws {
            guard Finger(rawValue: finger) != nil else {
                throw ValidationError("--finger must be one of \(Finger.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func execute(_ environment: Environment) async throws {
            let chosen = Finger(rawValue: finger)!
            let json = global.json
            if !json {
                let finger = chosen.rawValue.replacingOccurrences(of: "-", with: " ")
                Output.streamLine("Touch the sensor with your \(finger), lifting it between touches.")
            }
            let show: @Sendable (EnrollStage) -> Void = { stage in
                let line: String = switch stage {
                case .stagePassed(let number): json ? #"{"stage":\#(number)}"# : "stage \(number) passed"
                case .retry(let reason): json ? #"{"retry":"\#(reason.rawValue)"}"# : "again: \(reason.rawValue)"
                case .completed: json ? #"{"completed":true}"# : "enrolled \(chosen.rawValue)"
                }
                // Each stage shows while the person is still at the sensor.
                Output.streamLine(line)
            }
            if try await environment.throughDaemon({ try await $0.enroll(chosen, device: target.device, progress: show) }) == nil {
                try await environment.withKit(for: .biometrics) { kit in try await kit.biometrics(named: target.device).enroll(chosen, progress: show) }
            }
        }
    }
}

extension SoundPlayCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        let clip = try APISoundPlay(sound: sound).clip()
        // Through the daemon when it runs (it holds the speaker), else here.
        var played = try await environment.throughDaemon { try await $0.playSound(sound, device: target.device) }
        if played == nil {
            try await environment.withKit(for: .speaker) { kit in try await kit.speaker(named: target.device).play(clip) }
            played = APISoundPlayed(clip)
        }
        guard let played else { return }
        try emit(played)
    }
}

extension HapticsPlayCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        let named = try APIHapticsPlay(pattern: pattern).named()
        // Through the daemon when it runs (it holds the haptics), else here.
        var played = try await environment.throughDaemon { try await $0.playHaptics(pattern, device: target.device) }
        if played == nil {
            played = APIHapticsPlayed(pattern, try await environment.withKit(for: .haptics) { kit in try await kit.haptics(named: target.device).play(named) })
        }
        guard let played else { return }
        try emit(played)
    }
}

extension BioStatusCommand: FieldHALSubcommand {
    public func run() async throws { try await runReportingFailures() }

    public func execute(_ environment: Environment) async throws {
        var availability = try await environment.throughDaemon { try await $0.biometrics(device: target.device) }
        if availability == nil {
            availability = try await environment.withKit(for: .biometrics) { kit in try await kit.biometrics(named: target.device).availability() }
        }
        guard let availability else { return }
        try emit(availability)
    }
}

/// A recording that ended early because its device failed: the device's error, so the exit
/// status says what failed, and where what was recorded before it is kept.
private func recordingEndedEarly(_ failure: FieldHALError, after seconds: Double, keptIn path: String) -> FieldHALError {
    let kept = String(format: "the %.2f s recorded before it are kept in %@", seconds, path)
    return FieldHALError(failure.kind, subject: failure.subject, detail: failure.detail, advice: failure.advice.map { "\($0); \(kept)" } ?? kept)
}
