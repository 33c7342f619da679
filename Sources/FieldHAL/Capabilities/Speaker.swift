#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc  // sin
#endif

/// A short sound to play: 16-bit mono PCM, made in memory (alert sounds are a second or
/// less, so there is nothing to stream).
public struct SoundClip: Sendable, Equatable {
    public var name: String
    public var sampleRate: Int
    public var samples: [Int16]

    public init(name: String, sampleRate: Int, samples: [Int16]) {
        self.name = name
        self.sampleRate = sampleRate
        self.samples = samples
    }

    public var duration: Duration { .nanoseconds(Int64(samples.count) * 1_000_000_000 / Int64(sampleRate)) }

    /// The soft alert for a nearby duress alert (seed 000 Req 29): two falling sine notes,
    /// 880 Hz then 660 Hz, each 180 ms with a 20 ms fade in and out so nothing clicks, at
    /// −12 dBFS — noticeable beside the banner, not an alarm that draws attention.
    public static func softAlert(sampleRate: Int = 48_000) -> SoundClip {
        let amplitude = 32767.0 * 0.25
        let noteFrames = sampleRate * 180 / 1000
        let fadeFrames = sampleRate * 20 / 1000
        let gapFrames = sampleRate * 40 / 1000
        var samples: [Int16] = []
        samples.reserveCapacity(2 * noteFrames + gapFrames)
        for (index, frequency) in [880.0, 660.0].enumerated() {
            if index > 0 { samples += repeatElement(0, count: gapFrames) }
            for frame in 0..<noteFrames {
                let envelope = min(1, Double(min(frame, noteFrames - 1 - frame)) / Double(fadeFrames))
                let value = amplitude * envelope * sin(2 * Double.pi * frequency * Double(frame) / Double(sampleRate))
                samples.append(Int16(value.rounded()))
            }
        }
        return SoundClip(name: "soft-alert", sampleRate: sampleRate, samples: samples)
    }

    /// The clips FieldHAL ships, by the name `fieldhal sound play` takes.
    public static func named(_ name: String) -> SoundClip? {
        name == "soft-alert" ? softAlert() : nil
    }
    public static let names = ["soft-alert"]
}

/// Sound output: the alert sound the flows play beside the haptic pattern.
public protocol Speaker: Device {
    /// Plays the clip and returns when it has been heard (drained). Cancelling stops it.
    func play(_ clip: SoundClip) async throws
}
