import FieldHAL
import FieldHALServer
import Foundation
import Synchronization
import Testing

/// A reader with a tag always in the field, read in `delay`; it counts how many reads run
/// at once, which must never be more than one on a chip.
final class ScriptedChipReader: NFCReader {
    let deviceName = "scripted reader"
    let delay: Duration
    let inFlight = Atomic<Int>(0)
    let mostAtOnce = Atomic<Int>(0)
    let finished = Mutex<[String]>([])

    init(delay: Duration) { self.delay = delay }

    func readTag(timeout: Duration) async throws -> NFCTag {
        let now = inFlight.add(1, ordering: .relaxed).newValue
        defer { inFlight.subtract(1, ordering: .relaxed) }
        _ = mostAtOnce.max(now, ordering: .relaxed)
        do { try await Task.sleep(for: min(delay, timeout)) } catch { throw FieldHALError.cancelled("scripted reader") }
        guard delay <= timeout else { throw FieldHALError.timeout("scripted reader", after: timeout, waitingFor: "tag") }
        return NFCTag(type: .type2, uid: [0x04, 0xA1, 0xB2, 0xC3])
    }

    func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag { try await readTag(timeout: timeout) }
    func close() async {}
}

/// A tag emulator nobody reads (or read after `readAfter`); it counts the emulations
/// started and those cancelled, as libnfc's abort would end them.
final class ScriptedChipEmulator: NFCTagEmulator {
    let deviceName = "scripted emulator"
    let readAfter: Duration?
    let started = Atomic<Int>(0)
    let cancelled = Atomic<Int>(0)

    init(readAfter: Duration? = nil) { self.readAfter = readAfter }

    func emulate(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome {
        started.add(1, ordering: .relaxed)
        do {
            if let readAfter, readAfter <= timeout {
                try await Task.sleep(for: readAfter)
                return EmulationOutcome(wasRead: true, commandCount: 4)
            }
            try await Task.sleep(for: timeout)
            return EmulationOutcome(wasRead: false, commandCount: 0)
        } catch {
            cancelled.add(1, ordering: .relaxed)
            throw FieldHALError.cancelled("scripted emulator")
        }
    }

    func close() async {}
}

/// Waits until `condition` holds (the full suite loads the machine: no fixed sleeps). The
/// bound only guards against a hang: 10 s was exceeded on a machine running 180 tests at once.
func waitUntil(_ what: String, within limit: Duration = .seconds(30), _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + limit
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("not within \(limit): \(what)")
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

func elapsed(_ body: () async throws -> Void) async rethrows -> Duration {
    let start = ContinuousClock.now
    try await body()
    return ContinuousClock.now - start
}

/// The NFC chip's turn-taking (issue 20): one chip, a reader and a tag offer, many callers.
@Suite(.timeLimit(.minutes(1)))
struct NFCTurnsTests {
    static let message = NDEFMessage.uri("trf:duress:alert-1")

    @Test func aReadTakesTheChipFromTheOfferAndTheOfferResumes() async throws {
        let reader = ScriptedChipReader(delay: .milliseconds(50))
        let emulator = ScriptedChipEmulator()
        let turns = NFCTurns(reader: reader, emulator: emulator)
        let offer = Task { try await turns.offer(Self.message, timeout: .seconds(60)) }
        try await waitUntil("the offer emulates") { emulator.started.load(ordering: .relaxed) == 1 }
        var tag: NFCTag?
        // Bounds far below the offer's 60 s, with room for a loaded machine.
        let took = try await elapsed { tag = try await turns.readTag(timeout: .seconds(5), for: "a test read") }
        #expect(tag?.uid == [0x04, 0xA1, 0xB2, 0xC3])
        #expect(took < .seconds(3), "the read waited \(took) behind the offer")
        #expect(emulator.cancelled.load(ordering: .relaxed) == 1, "the offer's emulation was not ended for the read")
        // The offer takes the chip back and goes on.
        try await waitUntil("the offer resumes") { emulator.started.load(ordering: .relaxed) == 2 }
        // A second read the same way.
        _ = try await turns.readTag(timeout: .seconds(5), for: "another read")
        try await waitUntil("the offer resumes again") { emulator.started.load(ordering: .relaxed) == 3 }
        let ending = await elapsed {
            offer.cancel()
            let result = await offer.result
            #expect(throws: (any Error).self) { try result.get() }
        }
        #expect(ending < .seconds(3))
    }

    @Test func anOfferThatIsReadEnds() async throws {
        let turns = NFCTurns(reader: nil, emulator: ScriptedChipEmulator(readAfter: .milliseconds(100)))
        let outcome = try await turns.offer(Self.message, timeout: .seconds(5))
        #expect(outcome.wasRead)
    }

    @Test func anOfferNobodyReadsEndsNotReadWhenItsTimeIsUp() async throws {
        let emulator = ScriptedChipEmulator()
        let turns = NFCTurns(reader: ScriptedChipReader(delay: .milliseconds(100)), emulator: emulator)
        // 5 s: the offer must still have time left when the read gives the chip back, or it
        // rightly ends without resuming (a loaded CI machine once took 2 s to get there).
        let offer = Task { try await turns.offer(Self.message, timeout: .seconds(5)) }
        try await waitUntil("the offer emulates") { emulator.started.load(ordering: .relaxed) == 1 }
        // A generous bound for the read (a loaded machine once took over 1 s): what is
        // tested is the offer's outcome.
        _ = try await turns.readTag(timeout: .seconds(5), for: "a read in the middle")
        let outcome = try await offer.value
        #expect(!outcome.wasRead)
        #expect(emulator.started.load(ordering: .relaxed) == 2)
    }

    @Test func requestsTakeTurnsFirstComeFirstServed() async throws {
        // The first read holds the chip long enough for the others to line up even when the
        // full suite loads the machine (1 s was once too short in CI).
        let reader = ScriptedChipReader(delay: .seconds(3))
        let turns = NFCTurns(reader: reader, emulator: nil)
        let order = LockedValue<[String]>([])
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, label) in ["first", "second", "third", "fourth"].enumerated() {
                group.addTask {
                    _ = try await turns.readTag(timeout: .seconds(30), for: label)
                    order.withLock { $0.append(label) }
                }
                // Each in the queue before the next comes.
                try await waitUntil("\(label) is in line") { turns.holderDescription == "first" && turns.waitingCount == index }
            }
            try await group.waitForAll()
        }
        #expect(order.value == ["first", "second", "third", "fourth"])
        #expect(reader.mostAtOnce.load(ordering: .relaxed) == 1, "two reads ran on the chip at once")
    }

    @Test func aRequestWhoseTurnDoesNotComeSaysWhatHoldsTheChip() async throws {
        let emulator = ScriptedChipEmulator()
        let turns = NFCTurns(reader: ScriptedChipReader(delay: .milliseconds(10)), emulator: emulator)
        let holder = Task { try await turns.emulate(Self.message, timeout: .seconds(60), for: "an emulation for uid 1000 (pid 42)") }
        try await waitUntil("the emulation holds the chip") { emulator.started.load(ordering: .relaxed) == 1 }
        var failure: FieldHALError?
        let took = await elapsed {
            do { _ = try await turns.readTag(timeout: .milliseconds(400), for: "a read") } catch let error as FieldHALError { failure = error } catch {}
        }
        #expect(failure?.kind == .busy)
        #expect(failure?.detail.contains("an emulation for uid 1000 (pid 42) has held it for") == true, "\(String(describing: failure))")
        #expect(took >= .milliseconds(390) && took < .seconds(5), "\(took)")
        holder.cancel()
        _ = await holder.result
        // The chip is free again at once, not after the holder's 60 s.
        let next = try await elapsed { _ = try await turns.readTag(timeout: .seconds(5), for: "a read after") }
        #expect(next < .seconds(3))
    }

    @Test func aCallerThatGoesAwayLeavesTheQueueAndGivesTheChipBack() async throws {
        let reader = ScriptedChipReader(delay: .milliseconds(20))
        let emulator = ScriptedChipEmulator()
        let turns = NFCTurns(reader: reader, emulator: emulator)
        let holder = Task { try await turns.emulate(Self.message, timeout: .seconds(60), for: "a client that hangs up") }
        try await waitUntil("the emulation holds the chip") { emulator.started.load(ordering: .relaxed) == 1 }
        let waiter = Task { try await turns.readTag(timeout: .seconds(60), for: "a client that gives up") }
        try await waitUntil("the read waits") { turns.waitingCount == 1 }
        let leaving = await elapsed {
            waiter.cancel()
            let result = await waiter.result
            #expect((try? result.get()) == nil)
        }
        #expect(leaving < .seconds(3), "a cancelled waiter stayed \(leaving)")
        holder.cancel()
        _ = await holder.result
        #expect(turns.holderDescription == nil)
        let next = try await elapsed { _ = try await turns.readTag(timeout: .seconds(5), for: "the next client") }
        #expect(next < .seconds(3), "the chip was not given back: \(next)")
    }

    @Test func aMissingDeviceIsSaidAtOnce() async throws {
        let turns = NFCTurns(reader: nil, emulator: nil)
        await #expect(throws: FieldHALError.self) { _ = try await turns.readTag(timeout: .seconds(5), for: "a read") }
        await #expect(throws: FieldHALError.self) { _ = try await turns.offer(Self.message, timeout: .seconds(5)) }
    }

    /// A reload hands the chip's new devices over: the offer moves to the new emulator.
    @Test func aReplacedEmulatorTakesOverTheOffer() async throws {
        let old = ScriptedChipEmulator()
        let new = ScriptedChipEmulator()
        let turns = NFCTurns(reader: nil, emulator: old)
        let offer = Task { try await turns.offer(Self.message, timeout: .seconds(60)) }
        try await waitUntil("the offer emulates") { old.started.load(ordering: .relaxed) == 1 }
        turns.replace(reader: nil, emulator: new)
        try await waitUntil("the offer moves to the new emulator") { new.started.load(ordering: .relaxed) == 1 }
        #expect(old.cancelled.load(ordering: .relaxed) == 1)
        offer.cancel()
        _ = await offer.result
    }
}
