import FieldHAL
import Synchronization

/// One NFC chip shared by everyone in the daemon: API clients, the NFC acknowledgement of an
/// alert and the duress tag's offer. A chip is reader or tag, never both at once, so they
/// take turns:
///
/// - **Foreground** requests (a read, a write, an emulation a client asked for) are served
///   one at a time, first come first served. Each waits for its turn within its own timeout
///   (the whole call takes at most that long); a request whose turn does not come in time
///   fails `busy`, naming what holds the chip and for how long.
/// - A **background** emulation (the duress tag's offer, Req 32) yields the chip to any
///   foreground request — its running emulation is cancelled, which libnfc ends with
///   `nfc_abort_command` — and resumes, for what is left of its time, when the chip is free.
///   So a read on the duressed kit works exactly as on any other kit, and the offer goes on.
///
/// A request whose caller goes away (the task is cancelled: a client hung up) leaves the
/// queue at once, or gives the chip back at once if it held it.
public final class NFCTurns: Sendable {
    public enum Priority: Sendable {
        case foreground
        case background
    }

    private struct Waiter {
        let id: Int
        let label: String
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct Holder {
        let id: Int
        let label: String
        let since: ContinuousClock.Instant
    }

    private struct State {
        var reader: (any NFCReader)?
        var emulator: (any NFCTagEmulator)?
        var holder: Holder?
        var waiting: [Waiter] = []
        /// Background emulations waiting for the chip to be free.
        var idle: [Int: CheckedContinuation<Void, any Error>] = [:]
        /// The background emulation on the chip now.
        var background: (id: Int, task: Task<EmulationOutcome, any Error>)?
        /// Background runs cancelled to make way: they resume rather than fail.
        var preempted: Set<Int> = []
        /// Waits given up (cancelled, or out of time) before they were queued.
        var abandoned: [Int: any Error] = [:]
        var nextId = 0

        var isFree: Bool { holder == nil && waiting.isEmpty }

        mutating func newId() -> Int {
            nextId += 1
            return nextId
        }
    }

    private let state: Mutex<State>

    public init(reader: (any NFCReader)?, emulator: (any NFCTagEmulator)?) {
        state = Mutex(State(reader: reader, emulator: emulator))
    }

    /// The chip's devices after a reload. A background emulation moves to the new emulator;
    /// a foreground request on the old devices ends as the old kit is closed.
    public func replace(reader: (any NFCReader)?, emulator: (any NFCTagEmulator)?) {
        let moving = state.withLock { state -> Task<EmulationOutcome, any Error>? in
            state.reader = reader
            state.emulator = emulator
            guard let background = state.background else { return nil }
            state.preempted.insert(background.id)
            return background.task
        }
        moving?.cancel()
    }

    public var hasReader: Bool { state.withLock { $0.reader != nil } }
    public var hasEmulator: Bool { state.withLock { $0.emulator != nil } }

    /// What holds the chip now, for errors and status.
    public var holderDescription: String? { state.withLock { $0.holder?.label } }

    /// How many foreground requests wait for the chip.
    public var waitingCount: Int { state.withLock { $0.waiting.count } }

    // MARK: Foreground

    public func readTag(timeout: Duration, for label: String) async throws -> NFCTag {
        try await foreground(label, within: timeout) { state, left in
            guard let reader = state.reader else { throw Self.missing(.nfcReader) }
            return { try await reader.readTag(timeout: left) }
        }
    }

    public func write(_ message: NDEFMessage, timeout: Duration, for label: String) async throws -> NFCTag {
        try await foreground(label, within: timeout) { state, left in
            guard let reader = state.reader else { throw Self.missing(.nfcReader) }
            return { try await reader.write(message, timeout: left) }
        }
    }

    public func emulate(_ message: NDEFMessage, timeout: Duration, for label: String) async throws -> EmulationOutcome {
        try await foreground(label, within: timeout) { state, left in
            guard let emulator = state.emulator else { throw Self.missing(.nfcEmulator) }
            return { try await emulator.emulate(message, timeout: left) }
        }
    }

    private static func missing(_ capability: Capability) -> FieldHALError {
        FieldHALError(.notConfigured, subject: capability.rawValue, detail: "this kit has no \(capability.rawValue)",
                      advice: "add a [\(capability.rawValue)] section to the configuration and reload the daemon")
    }

    /// Waits for the turn within `timeout`, then runs the operation `prepare` picks from the
    /// devices loaded now, with the time that is left.
    private func foreground<T: Sendable>(
        _ label: String, within timeout: Duration,
        _ prepare: (State, Duration) throws -> @Sendable () async throws -> T
    ) async throws -> T {
        let deadline = ContinuousClock.now + timeout
        // A missing device is said at once, not after a wait.
        _ = try state.withLock { try prepare($0, timeout) }
        let id = state.withLock { $0.newId() }
        try await acquire(id, label, until: deadline, timeout: timeout)
        defer { release(id) }
        await preemptBackground()
        try Task.checkCancellation()
        let left = max(deadline - ContinuousClock.now, .milliseconds(1))
        let operation = try state.withLock { try prepare($0, left) }
        do {
            return try await operation()
        } catch let error as FieldHALError where error.kind == .timeout && error.detail == "no tag within \(left.secondsDescription)" {
            // The caller waited its whole timeout, its turn included: say that one, as the
            // reader says it to a program that opens it alone ("no tag within 0.5 s").
            throw FieldHALError.timeout(error.subject, after: timeout, waitingFor: "tag")
        }
    }

    /// Cancels the background emulation on the chip, if any, and returns when it has let go
    /// of the chip; it resumes when the chip is free again.
    private func preemptBackground() async {
        let preempted = state.withLock { state -> Task<EmulationOutcome, any Error>? in
            guard let background = state.background else { return nil }
            state.preempted.insert(background.id)
            return background.task
        }
        preempted?.cancel()
        _ = await preempted?.result
    }

    private func acquire(_ id: Int, _ label: String, until deadline: ContinuousClock.Instant, timeout: Duration) async throws {
        let granted = state.withLock { state -> Bool in
            guard state.isFree else { return false }
            state.holder = Holder(id: id, label: label, since: .now)
            return true
        }
        if granted { return }
        // Out of time: `busy`, naming what held the chip all along.
        let expiry = Task { [self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            guard !Task.isCancelled else { return }
            abandon(id, with: busy(waited: timeout))
        }
        defer { forgetAbandoned(id, expiry: expiry) }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Next { case run, wait, fail(any Error) }
                let next = state.withLock { state -> Next in
                    if let error = state.abandoned.removeValue(forKey: id) { return .fail(error) }
                    if state.isFree {
                        state.holder = Holder(id: id, label: label, since: .now)
                        return .run
                    }
                    state.waiting.append(Waiter(id: id, label: label, continuation: continuation))
                    return .wait
                }
                switch next {
                case .run: continuation.resume()
                case .wait: break
                case .fail(let error): continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            abandon(id, with: FieldHALError.cancelled("nfc"))
        }
    }

    private func busy(waited timeout: Duration) -> FieldHALError {
        let holder = state.withLock { $0.holder }
        let what = holder.map { "\($0.label) has held it for \((ContinuousClock.now - $0.since).secondsDescription)" } ?? "other requests were ahead"
        return FieldHALError(.busy, subject: "nfc", detail: "the chip was in use for all of \(timeout.secondsDescription): \(what)",
                             advice: "try again when it is done, or wait longer (a larger timeout)")
    }

    /// A wait has ended: its expiry stops, and a give-up that came too late to matter (the
    /// expiry firing as the turn was granted) leaves no entry behind. Bound of `abandoned`:
    /// only waits not yet begun, each removed as it begins or here.
    private func forgetAbandoned(_ id: Int, expiry: Task<Void, Never>) {
        expiry.cancel()
        Task { [self] in
            _ = await expiry.value
            state.withLock { _ = $0.abandoned.removeValue(forKey: id) }
        }
    }

    /// A wait ends without the chip: its caller was cancelled, or its time ran out.
    private func abandon(_ id: Int, with error: any Error) {
        let continuation = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            if let index = state.waiting.firstIndex(where: { $0.id == id }) {
                return state.waiting.remove(at: index).continuation
            }
            if let waiting = state.idle.removeValue(forKey: id) { return waiting }
            // Not queued yet (the wait is about to begin): it fails as it begins. Granted
            // already: nothing to undo here, the holder gives the chip back itself.
            if state.holder?.id != id { state.abandoned[id] = error }
            return nil
        }
        continuation?.resume(throwing: error)
    }

    private func release(_ id: Int) {
        let wake = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            guard state.holder?.id == id else { return [] }
            state.holder = nil
            if !state.waiting.isEmpty {
                let next = state.waiting.removeFirst()
                state.holder = Holder(id: next.id, label: next.label, since: .now)
                return [next.continuation]
            }
            defer { state.idle.removeAll() }
            return Array(state.idle.values)
        }
        for continuation in wake { continuation.resume() }
    }

    // MARK: Background

    /// Offers `message` as a tag for `timeout`, giving the chip to every foreground request
    /// that comes meanwhile and taking it back after. Returns when a reader has read the
    /// whole message, or not read when the time is up.
    public func offer(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome {
        let deadline = ContinuousClock.now + timeout
        guard hasEmulator else { throw Self.missing(.nfcEmulator) }
        let id = state.withLock { $0.newId() }
        while true {
            try Task.checkCancellation()
            let left = deadline - ContinuousClock.now
            guard left > .zero else { return EmulationOutcome(wasRead: false, commandCount: 0) }
            let started = try state.withLock { state -> Task<EmulationOutcome, any Error>? in
                guard let emulator = state.emulator else { throw Self.missing(.nfcEmulator) }
                guard state.isFree, state.background == nil else { return nil }
                let task = Task { try await emulator.emulate(message, timeout: left) }
                state.background = (id, task)
                return task
            }
            guard let task = started else {
                try await waitUntilFree(id, until: deadline)
                continue
            }
            let result = await withTaskCancellationHandler { await task.result } onCancel: { task.cancel() }
            let wasPreempted = state.withLock { state -> Bool in
                if state.background?.id == id { state.background = nil }
                return state.preempted.remove(id) != nil
            }
            // Another background run may be waiting for this one to end.
            wakeIdle()
            try Task.checkCancellation()
            switch result {
            case .success(let outcome) where !(wasPreempted && !outcome.wasRead): return outcome
            case .success: continue
            case .failure where wasPreempted: continue
            case .failure(let error): throw error
            }
        }
    }

    private func wakeIdle() {
        let wake = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            guard state.isFree else { return [] }
            defer { state.idle.removeAll() }
            return Array(state.idle.values)
        }
        for continuation in wake { continuation.resume() }
    }

    /// Returns when no foreground request holds or waits for the chip (or at the deadline).
    private func waitUntilFree(_ id: Int, until deadline: ContinuousClock.Instant) async throws {
        let expiry = Task { [self] in
            try? await Task.sleep(until: deadline, clock: .continuous)
            guard !Task.isCancelled else { return }
            let continuation = state.withLock { $0.idle.removeValue(forKey: id) }
            continuation?.resume()
        }
        defer { forgetAbandoned(id, expiry: expiry) }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Next { case go, wait, fail(any Error) }
                let next = state.withLock { state -> Next in
                    if let error = state.abandoned.removeValue(forKey: id) { return .fail(error) }
                    if state.isFree && state.background == nil { return .go }
                    state.idle[id] = continuation
                    return .wait
                }
                switch next {
                case .go: continuation.resume()
                case .wait: break
                case .fail(let error): continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            abandon(id, with: FieldHALError.cancelled("nfc"))
        }
    }

    // MARK: Presence

    /// What one look for a tag found.
    public enum Look: Sendable {
        case tag(NFCTag)
        /// No tag answered within the window.
        case noTag
        /// A foreground request holds or waits for the chip: no look this time, so that
        /// nobody waits behind a look they did not ask for.
        case chipInUse
    }

    /// One look for a tag in the field, for at most `window`: the turn of the tag presence
    /// watch. It takes the chip only when no foreground request holds or waits for it, and it
    /// preempts a background emulation (the duress tag's offer) exactly as a client's read
    /// does, so that a watched kit looks for tags on the same schedule whatever it offers.
    public func look(window: Duration, label: String) async throws -> Look {
        let id = state.withLock { $0.newId() }
        let taken = try state.withLock { state -> Bool in
            guard state.reader != nil else { throw Self.missing(.nfcReader) }
            guard state.isFree else { return false }
            state.holder = Holder(id: id, label: label, since: .now)
            return true
        }
        guard taken else { return .chipInUse }
        defer { release(id) }
        await preemptBackground()
        try Task.checkCancellation()
        guard let reader = state.withLock({ $0.reader }) else { throw Self.missing(.nfcReader) }
        do {
            return .tag(try await reader.readTag(timeout: window))
        } catch let error as FieldHALError where error.kind == .timeout {
            return .noTag
        }
    }

    // MARK: Views

    /// This chip as an `NFCReader` whose requests are labelled `label` (said to whoever
    /// waits behind them).
    public func reader(for label: String) -> some NFCReader { TurnReader(turns: self, label: label) }

    /// This chip as an `NFCTagEmulator`: foreground (a client's emulation) or background
    /// (the duress tag's offer, which yields to everyone).
    public func emulator(for label: String, priority: Priority) -> some NFCTagEmulator {
        TurnEmulator(turns: self, label: label, priority: priority)
    }
}

private struct TurnReader: NFCReader {
    let turns: NFCTurns
    let label: String
    var deviceName: String { "nfc (shared)" }
    func readTag(timeout: Duration) async throws -> NFCTag { try await turns.readTag(timeout: timeout, for: label) }
    func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag {
        try await turns.write(message, timeout: timeout, for: label)
    }
    /// The daemon owns the chip: a user's close does not close it.
    func close() async {}
}

private struct TurnEmulator: NFCTagEmulator {
    let turns: NFCTurns
    let label: String
    let priority: NFCTurns.Priority
    var deviceName: String { "nfc-emulator (shared)" }
    func emulate(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome {
        switch priority {
        case .foreground: try await turns.emulate(message, timeout: timeout, for: label)
        case .background: try await turns.offer(message, timeout: timeout)
        }
    }
    func close() async {}
}
