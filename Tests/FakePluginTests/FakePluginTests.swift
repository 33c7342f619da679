import Foundation
import Testing
@testable import FakePlugin
@testable import FieldHAL
@testable import FieldHALMedia

let context = PluginContext(configDirectory: NSTemporaryDirectory(), stateDirectory: NSTemporaryDirectory())

func open(_ capability: Capability, _ parameters: [String: ConfigValue] = [:]) async throws -> CapabilityProvider {
    try await FakePlugin.open(capability, PluginParameters(parameters), context)
}

func point(_ lat: Double, _ lon: Double, acc: Double = 5, alt: Double? = nil, mode: String? = nil) -> ConfigValue {
    var table: [String: ConfigValue] = ["lat": .float(lat), "lon": .float(lon), "acc": .float(acc)]
    if let alt { table["alt"] = .float(alt) }
    if let mode { table["mode"] = .string(mode) }
    return .table(table)
}

func temporaryPath(_ name: String) -> String {
    NSTemporaryDirectory() + "fieldhal-fake-\(UUID().uuidString)-\(name)"
}

@Suite("Fake GPS")
struct FakeLocationTests {
    func provider(_ parameters: [String: ConfigValue]) async throws -> any LocationProvider {
        guard case .location(let provider) = try await open(.location, parameters) else { throw SimulatedFailure() }
        return provider
    }

    @Test func playsTheTrackInOrder() async throws {
        // A live receiver: a watch starts at the point playing now, then follows the track.
        let gps = try await provider(["track": .array([point(52.5, 13.4, alt: 30), point(52.6, 13.5, acc: 8)]), "interval_ms": .integer(40)])
        var fixes: [Fix] = []
        for try await fix in gps.watch() {
            fixes.append(fix)
            if fixes.count == 4 { break }
        }
        for (fix, next) in zip(fixes, fixes.dropFirst()) {
            #expect(fix.latitude != next.latitude, "consecutive fixes are consecutive points")
            #expect(next.time > fix.time)
        }
        for fix in fixes {
            if fix.latitude == 52.5 {
                #expect(fix.mode == .threeD && fix.altitude == 30 && fix.longitude == 13.4 && fix.horizontalAccuracy == 5)
            } else {
                #expect(fix.latitude == 52.6 && fix.mode == .twoD && fix.altitude == nil && fix.horizontalAccuracy == 8)
            }
        }
    }

    @Test func currentFixIsLiveWhenTheTrackHasOne() async throws {
        let gps = try await provider(["track": .array([point(1, 2)])])
        // The fix is there at once; the timeout only has to outlast a busy 2-core test run.
        let reading = try await gps.currentFix(FixRequest(timeout: .seconds(5)))
        #expect(reading.source == .live)
        #expect(reading.fix.latitude == 1 && reading.fix.longitude == 2)
    }

    @Test func noFixEndsInATypedErrorWithinTheTimeout() async throws {
        let gps = try await provider(["no_fix": .boolean(true), "interval_ms": .integer(20)])
        let clock = ContinuousClock()
        let start = clock.now
        await #expect { try await gps.currentFix(FixRequest(timeout: .milliseconds(200))) } throws: {
            ($0 as? FieldHALError)?.kind == .noFix
        }
        // Generous: the point is that it ends, even on a loaded 2-core CI machine.
        #expect(clock.now - start < .seconds(10))
    }

    @Test func fallsBackToAYoungCachedFix() async throws {
        // One positioned point, then a receiver that loses the sky.
        let gps = try await provider(["track": .array([point(10, 20), point(0, 0, mode: "no-fix"), point(0, 0, mode: "no-fix")]),
                                      "interval_ms": .integer(100), "loop": .boolean(false)])
        try await Task.sleep(for: .milliseconds(150))
        let reading = try await gps.currentFix(FixRequest(timeout: .milliseconds(60), maxAge: .seconds(10)))
        #expect(reading.source == .cached)
        #expect(reading.fix.latitude == 10)
        #expect(reading.age >= 0.1)
        await #expect { try await gps.currentFix(FixRequest(timeout: .milliseconds(60), maxAge: .milliseconds(10))) } throws: {
            ($0 as? FieldHALError)?.kind == .noFix
        }
    }

    @Test func accuracyRequirementIsHonoured() async throws {
        let gps = try await provider(["track": .array([point(1, 1, acc: 50)]), "interval_ms": .integer(20)])
        await #expect { try await gps.currentFix(FixRequest(timeout: .milliseconds(100), maxAge: nil, requiredAccuracy: 10)) } throws: {
            ($0 as? FieldHALError)?.description.contains("at 10.0 m or better") == true
        }
    }

    @Test func nmeaLogIsPlayed() async throws {
        let path = temporaryPath("track.nmea")
        try """
        $GPGSA,A,3,04,05,,09,12,,,24,,,,,2.5,1.3,2.1*39
        $GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A
        $GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47
        $GPGGA,123520,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*00
        garbage line
        """.write(toFile: path, atomically: true, encoding: .utf8)
        let gps = try await provider(["nmea_file": .string(path)])
        let reading = try await gps.currentFix(FixRequest(timeout: .seconds(1)))
        let fix = reading.fix
        #expect(fix.mode == .threeD)
        #expect(abs(fix.latitude! - 48.1173) < 1e-6)
        #expect(abs(fix.longitude! - 11.516666) < 1e-5)
        #expect(fix.altitude == 545.4)
        #expect(fix.satellitesUsed == 8)
        #expect(abs(fix.speed! - 22.4 * 0.514444) < 1e-6)
        #expect(fix.course == 84.4)
        #expect(abs(fix.horizontalAccuracy! - 0.9 * 19) < 1e-9, "HDOP × 19 m, as gpsd reports it")
        #expect(abs(fix.verticalAccuracy! - 2.1 * 23) < 1e-9, "GSA's VDOP × 23 m")
        #expect(NMEATrack.points(fromLog: try String(contentsOfFile: path, encoding: .utf8)).count == 1, "bad checksum skipped")
    }

    @Test func watchEndsWhenTheConsumerIsCancelled() async throws {
        let gps = try await provider(["track": .array([point(1, 1)]), "interval_ms": .integer(60_000)])
        let task = Task {
            var count = 0
            for try await _ in gps.watch() { count += 1 }
            return count
        }
        try await Task.sleep(for: .milliseconds(100))
        let clock = ContinuousClock()
        let cancelled = clock.now
        task.cancel()
        // The next point is a minute away: ending now proves the wait was cancelled.
        #expect(try await task.value <= 1)
        #expect(clock.now - cancelled < .seconds(20))
    }

    /// A consumer that leaves at its first fix sees the watch end, never a "cancelled" error:
    /// many rounds, because the error came from a race between the stream's end and its
    /// producer's cancellation.
    @Test func aWatchLeftAtItsFirstFixEndsWithoutAnError() async throws {
        let gps = try await provider(["track": .array([point(1, 1), point(2, 2)]), "interval_ms": .integer(1)])
        for _ in 0..<5_000 {
            let consumer = Task {
                for try await _ in gps.watch() { withUnsafeCurrentTask { $0?.cancel() } }
            }
            try await consumer.value
        }
    }
}

struct SimulatedFailure: Error {}

@Suite("Fake NFC")
struct FakeNFCTests {
    func reader(_ tags: [[String: ConfigValue]]) async throws -> any NFCReader {
        guard case .nfcReader(let reader) = try await open(.nfcReader, ["tags": .array(tags.map { .table($0) })]) else {
            throw SimulatedFailure()
        }
        return reader
    }

    @Test func readsAType2TagWithText() async throws {
        let nfc = try await reader([["type": .string("ntag213"), "uid": .string("04:a1:b2:c3:d4:e5:f6"), "text": .string("trf:duress:42")]])
        let tag = try await nfc.readTag(timeout: .seconds(1))
        #expect(tag.type == .type2)
        #expect(tag.uidString == "04:A1:B2:C3:D4:E5:F6")
        #expect(tag.atqa == 0x0044 && tag.sak == 0)
        #expect(try tag.ndef?.records.first?.content() == .text("trf:duress:42", language: "en"))
    }

    @Test func readsAType4TagThroughTheAPDUExchange() async throws {
        let nfc = try await reader([["type": .string("type4"), "uri": .string("https://example.com/a")]])
        let tag = try await nfc.readTag(timeout: .seconds(1))
        #expect(tag.type == .type4)
        #expect(tag.ndef == .uri("https://example.com/a"))
    }

    @Test func tagsArriveAndLeaveOnSchedule() async throws {
        let nfc = try await reader([
            ["uid": .string("04:00:00:00:00:00:01"), "arrive_ms": .integer(150), "leave_ms": .integer(10_000)],
            ["uid": .string("04:00:00:00:00:00:02"), "arrive_ms": .integer(20_000)],
        ])
        let clock = ContinuousClock()
        let start = clock.now
        #expect(try await nfc.readTag(timeout: .seconds(5)).uid.last == 1)
        #expect(clock.now - start >= .milliseconds(140))
        try await Task.sleep(until: start + .milliseconds(10_050), clock: .continuous)
        await #expect { try await nfc.readTag(timeout: .milliseconds(100)) } throws: { ($0 as? FieldHALError)?.kind == .timeout }
        #expect(try await nfc.readTag(timeout: .seconds(15)).uid.last == 2)
        #expect(try await nfc.readTag(timeout: .seconds(1)).ndef == .empty, "a blank formatted tag")
    }

    @Test func corruptTagIsATypedError() async throws {
        let nfc = try await reader([["raw_data": .string("03 10 D1 01 0C 55")]])
        await #expect { try await nfc.readTag(timeout: .seconds(1)) } throws: {
            guard let error = $0 as? FieldHALError else { return false }
            return error.kind == .malformedData && error.description.contains("truncated")
        }
    }

    @Test func writeThenReadBack() async throws {
        let nfc = try await reader([["type": .string("ntag213")]])
        let message = NDEFMessage.uri("trf:duress:abc-123")
        #expect(try await nfc.write(message, timeout: .seconds(1)).ndef == message)
        #expect(try await nfc.readTag(timeout: .seconds(1)).ndef == message)
    }

    @Test func classicTagsCannotBeWritten() async throws {
        let nfc = try await reader([["type": .string("mifare-classic"), "uid": .string("01020304")]])
        await #expect { try await nfc.write(.uri("x:y"), timeout: .seconds(1)) } throws: { ($0 as? FieldHALError)?.kind == .unsupported }
    }

    @Test func waitingCanBeCancelled() async throws {
        let nfc = try await reader([])
        let task = Task { try await nfc.readTag(timeout: .seconds(60)) }
        try await Task.sleep(for: .milliseconds(50))
        task.cancel()
        await #expect { try await task.value } throws: { ($0 as? FieldHALError)?.kind == .cancelled }
    }

    @Test func emulatedTagIsReadByTheScriptedReader() async throws {
        guard case .nfcEmulator(let emulator) = try await open(.nfcEmulator, ["read_after_ms": .integer(20)]) else { throw SimulatedFailure() }
        let message = try NDEFMessage.text("trf:duress:alert-7")
        let outcome = try await emulator.emulate(message, timeout: .seconds(2))
        #expect(outcome.wasRead)
        #expect(outcome.commandCount >= 6)
        #expect(await (emulator as! FakeNFCTagEmulator).lastMessageRead == message)
    }

    @Test func emulationWithNoReaderTimesOutUnread() async throws {
        guard case .nfcEmulator(let emulator) = try await open(.nfcEmulator, ["reader": .string("absent")]) else { throw SimulatedFailure() }
        let outcome = try await emulator.emulate(.uri("trf:duress:1"), timeout: .milliseconds(100))
        #expect(!outcome.wasRead)
    }
}

@Suite("Fake camera, microphone, haptics, biometrics")
struct FakeMediaTests {
    /// Decodes a JPEG with libjpeg-turbo's djpeg into binary PPM.
    func decode(_ jpeg: [UInt8]) throws -> (width: Int, height: Int, pixels: [UInt8]) {
        let input = temporaryPath("photo.jpg"), output = temporaryPath("photo.ppm")
        try Data(jpeg).write(to: URL(fileURLWithPath: input))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/djpeg")
        process.arguments = ["-pnm", "-outfile", output, input]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "djpeg decodes the file")
        let ppm = [UInt8](try Data(contentsOf: URL(fileURLWithPath: output)))
        // Header: "P6\n<w> <h>\n255\n"
        var fields: [String] = [], current = "", index = 0
        while fields.count < 4 {
            let byte = ppm[index]; index += 1
            if byte == 0x0A || byte == 0x20 { if !current.isEmpty { fields.append(current); current = "" } } else { current.append(Character(UnicodeScalar(byte))) }
        }
        #expect(fields[0] == "P6")
        return (Int(fields[1])!, Int(fields[2])!, Array(ppm[index...]))
    }

    @Test(arguments: [(640, 480), (321, 97), (16, 16)])
    func cameraProducesADecodableJPEGOfTheRequestedSize(width: Int, height: Int) async throws {
        guard case .camera(let camera) = try await open(.camera) else { throw SimulatedFailure() }
        let photo = try await camera.captureStill(PhotoRequest(width: width, height: height, quality: 90))
        #expect(photo.jpeg.prefix(2) == [0xFF, 0xD8] && photo.jpeg.suffix(2) == [0xFF, 0xD9])
        let image = try decode(photo.jpeg)
        #expect(image.width == width && image.height == height)
        #expect(image.pixels.count == width * height * 3)
        if width >= 64 {
            // Sample the middle of the first (white) and sixth (red) colour bars.
            func pixel(_ x: Int, _ y: Int) -> [Int] { (0..<3).map { Int(image.pixels[(y * width + x) * 3 + $0]) } }
            let white = pixel(width / 16, height / 3), red = pixel(width * 11 / 16, height / 3)
            #expect(white.allSatisfy { abs($0 - 235) < 12 }, "\(white)")
            #expect(abs(red[0] - 235) < 12 && red[1] < 40 && red[2] < 40, "\(red)")
        }
    }

    /// `realtime = true` paces the frames at the request's rate (bench seizure times with it);
    /// by default a clip is made as fast as the frames are.
    @Test func aRealTimeCameraTakesAsLongAsItsClip() async throws {
        let directory = NSTemporaryDirectory() + "fieldhal-fake-video-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A real-time clip of 0.8 s takes at least that; one made as fast as the frames are, a
        // minute of video far less than a minute (bounds a busy machine cannot cross: a
        // bound of 0.7 s for 0.8 s of video failed once under load).
        for realtime in [true, false] {
            let request = VideoRequest(duration: realtime ? .milliseconds(800) : .seconds(60), width: 32, height: 32, framesPerSecond: 10)
            guard case .camera(let camera) = try await open(.camera, ["realtime": .boolean(realtime)]) else { throw SimulatedFailure() }
            let start = ContinuousClock.now
            let video = try await camera.recordVideo(request, to: directory + "/clip.avi")
            let took = ContinuousClock.now - start
            #expect(video.frames == (realtime ? 8 : 600))
            #expect(realtime ? took >= .milliseconds(700) : took < .seconds(30), "realtime \(realtime): \(took)")
        }
    }

    @Test func cameraRejectsImpossibleSizes() async throws {
        guard case .camera(let camera) = try await open(.camera) else { throw SimulatedFailure() }
        await #expect { try await camera.captureStill(PhotoRequest(width: 8, height: 8)) } throws: { ($0 as? FieldHALError)?.kind == .unsupported }
    }

    @Test func microphoneWritesAWAVWithTheRequestedFormatAndLevels() async throws {
        guard case .microphone(let mic) = try await open(.microphone, ["realtime": .boolean(false), "level_dbfs": .float(-6)]) else {
            throw SimulatedFailure()
        }
        let path = temporaryPath("tone.wav")
        let recording = try await mic.record(RecordingRequest(duration: .milliseconds(1500), sampleRate: 16_000, channels: 2), to: path)
        #expect(recording.frames == 24_000)
        #expect(abs(recording.peakDBFS - -6) < 0.1)
        #expect(abs(recording.rmsDBFS - -9.01) < 0.1, "a sine's RMS is 3 dB under its peak")
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        func le(_ offset: Int, _ size: Int) -> Int { (0..<size).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) } }
        #expect(bytes.count == 44 + 24_000 * 2 * 2)
        #expect(Array(bytes[0..<4]) == Array("RIFF".utf8) && le(4, 4) == bytes.count - 8)
        #expect(le(22, 2) == 2 && le(24, 4) == 16_000 && le(34, 2) == 16 && le(40, 4) == 96_000)
        // And it reads back through the fake's own WAV reader.
        #expect(try WAVSampleReader.monoSamples(bytes, file: path).count == 24_000)
    }

    @Test func microphoneRecordsInRealTimeAndCanBeCancelled() async throws {
        guard case .microphone(let mic) = try await open(.microphone) else { throw SimulatedFailure() }
        let path = temporaryPath("cancelled.wav")
        let task = Task { try await mic.record(RecordingRequest(duration: .seconds(30)), to: path) }
        try await Task.sleep(for: .milliseconds(250))
        task.cancel()
        await #expect { try await task.value } throws: { ($0 as? FieldHALError)?.kind == .cancelled }
        #expect(!FileManager.default.fileExists(atPath: path), "a cancelled recording leaves no file")
    }

    @Test func microphoneLoopsAWAVFile() async throws {
        let source = temporaryPath("source.wav")
        var samples: [UInt8] = []
        for index in 0..<100 { withUnsafeBytes(of: Int16(index % 2 == 0 ? 16384 : -16384).littleEndian) { samples += $0 } }
        try Data(WAVFileWriter.header(sampleRate: 8000, channels: 1, format: .s16le, dataBytes: samples.count) + samples)
            .write(to: URL(fileURLWithPath: source))
        guard case .microphone(let mic) = try await open(.microphone, ["file": .string(source), "realtime": .boolean(false)]) else {
            throw SimulatedFailure()
        }
        let recording = try await mic.record(RecordingRequest(duration: .seconds(1), sampleRate: 8000), to: temporaryPath("out.wav"))
        #expect(abs(recording.peakDBFS - -6.02) < 0.1)
        #expect(abs(recording.rmsDBFS - -6.02) < 0.1, "a square wave's RMS equals its peak")
    }

    @Test func hapticsRecordWhatWasPlayed() async throws {
        let log = temporaryPath("haptics.jsonl")
        guard case .haptics(let haptics) = try await open(.haptics, ["log_file": .string(log), "realtime": .boolean(false)]) else {
            throw SimulatedFailure()
        }
        try await haptics.play(.warning)
        try await haptics.play(.custom([HapticStep(.periodic(magnitude: 0.5, periodMilliseconds: 20), durationMilliseconds: 100)]))
        await #expect { try await haptics.play(.custom([HapticStep(.rumble(strong: 2, weak: 0), durationMilliseconds: 10)])) } throws: {
            ($0 as? FieldHALError)?.kind == .invalidArgument
        }
        let played = await (haptics as! FakeHapticsEngine).played
        #expect(played.map(\.name) == ["warning", "custom"])
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2 && lines[0].contains("\"pattern\":\"warning\""))
    }

    /// A daemon on the fake kit buzzes and sounds for every alert, for months: what the
    /// fakes remember in memory is bounded (issue 23: it grew with every alert).
    @Test func whatTheFeedbackFakesRememberIsBounded() async throws {
        guard case .haptics(let haptics) = try await open(.haptics, ["realtime": .boolean(false)]),
              case .speaker(let speaker) = try await open(.speaker, ["realtime": .boolean(false)]) else { throw SimulatedFailure() }
        for index in 0..<1000 {
            try await haptics.play(index.isMultiple(of: 2) ? .warning : .success)
            try await speaker.play(.softAlert())
        }
        let engine = haptics as! FakeHapticsEngine, fake = speaker as! FakeSpeaker
        let (patterns, patternCount) = await (engine.played, engine.playedCount)
        let (clips, clipCount) = await (fake.played, fake.playedCount)
        #expect(patterns.count == FakeHapticsEngine.recentLimit && patternCount == 1000)
        #expect(patterns.last?.name == "success")
        #expect(clips.count == FakeSpeaker.recentLimit && clipCount == 1000)
    }

    @Test func biometricsFollowTheScript() async throws {
        guard case .biometrics(let sensor) = try await open(.biometrics, [
            "outcomes": .array(["match", "no-match", "retry", "gone", "no-finger"].map { .string($0) }),
            "scan_delay_ms": .integer(10),
        ]) else { throw SimulatedFailure() }
        #expect(try await sensor.availability() == BiometricAvailability(hasSensor: true, enrolledFingers: [.rightIndex]))
        #expect(try await sensor.verify(timeout: .seconds(1)) == .match)
        #expect(try await sensor.verify(timeout: .seconds(1)) == .noMatch)
        #expect(try await sensor.verify(timeout: .seconds(1)) == .retry(.fingerNotCentered))
        await #expect { try await sensor.verify(timeout: .seconds(1)) } throws: { ($0 as? FieldHALError)?.kind == .disconnected }
        await #expect { try await sensor.verify(timeout: .milliseconds(50)) } throws: { ($0 as? FieldHALError)?.kind == .timeout }
        #expect(await (sensor as! FakeBiometricAuthenticator).isSensorClaimed == false, "the sensor is released after every verify")
    }

    @Test func cancelledVerifyReleasesTheSensor() async throws {
        guard case .biometrics(let sensor) = try await open(.biometrics, ["outcomes": .array([.string("no-finger")])]) else {
            throw SimulatedFailure()
        }
        let task = Task { try await sensor.verify(timeout: .seconds(60)) }
        try await Task.sleep(for: .milliseconds(50))
        await #expect { try await sensor.verify(timeout: .seconds(1)) } throws: { ($0 as? FieldHALError)?.kind == .busy }
        task.cancel()
        await #expect { try await task.value } throws: { ($0 as? FieldHALError)?.kind == .cancelled }
        #expect(await (sensor as! FakeBiometricAuthenticator).isSensorClaimed == false)
    }

    @Test func enrollReportsEveryStage() async throws {
        guard case .biometrics(let sensor) = try await open(.biometrics, ["enrolled": .array([]), "scan_delay_ms": .integer(1)]) else {
            throw SimulatedFailure()
        }
        #expect(try await sensor.availability().isEnrolled == false)
        let stages = StageLog()
        try await sensor.enroll(.leftThumb) { stages.append($0) }
        #expect(stages.all.last == .completed && stages.all.count == 6)
        #expect(try await sensor.availability().enrolledFingers == [.leftThumb])
    }
}

final class StageLog: @unchecked Sendable {
    private let lock = NSLock()
    private var stages: [EnrollStage] = []
    func append(_ stage: EnrollStage) { lock.withLock { stages.append(stage) } }
    var all: [EnrollStage] { lock.withLock { stages } }
}
