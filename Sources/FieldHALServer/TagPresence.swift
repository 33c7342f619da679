import FieldHAL
import Synchronization

/// Tags coming into the reader's field and leaving it, for everyone who follows `tag`
/// events: one watch of the shared chip however many follow it, as `SharedLocation` is one
/// watch of the receiver.
///
/// A reader reports a tag only when asked, so the watch looks: every `period` it takes a
/// turn on the chip for at most `window` (`NFCTurns.look`). The schedule is fixed — it does
/// not depend on what else the chip does — because a kit that offers the duress tag must look
/// for tags exactly as one that does not: its followers see the same events at the same
/// moments (docs/stealth.md). A look skipped because a client's read or write has the chip
/// changes nothing: that request reads the tag itself.
///
/// The watch runs only while someone follows: the chip is left alone otherwise. A follower
/// that arrives while a tag is present is told of it first.
public final class TagPresence: Sendable {
    public enum Change: Sendable, Equatable {
        case found(NFCTag)
        /// The tag that was in the field, as it was last read.
        case lost(NFCTag)
    }

    private struct State {
        /// The tag in the field at the last look; nil when none, or nobody has looked.
        var present: NFCTag?
        var poller: Task<Void, Never>?
        var generation = 0
    }

    private let changes = Broadcaster<Change>(bufferLimit: 16)
    private let state = Mutex(State())
    private let turns: NFCTurns
    private let period: Duration
    private let window: Duration
    /// Told of every change as followers are (the API host's sightings, for the MQTT bridge).
    private let told: (@Sendable (Change) -> Void)?

    /// One look of at most `window` every `period`: with the defaults a tag is seen within
    /// about a second of arriving, and an offered tag keeps three quarters of the chip's time.
    public init(_ turns: NFCTurns, period: Duration = .seconds(1), window: Duration = .milliseconds(250),
                told: (@Sendable (Change) -> Void)? = nil) {
        self.turns = turns
        self.period = period
        self.window = window
        self.told = told
    }

    /// The tag present now (if the watch is running and has seen one) and the changes from
    /// now on, taken together so that none falls between the two.
    public func watch() -> (present: NFCTag?, changes: AsyncThrowingStream<Change, any Error>) {
        state.withLock { state in
            let stream = changes.subscribe()
            if state.poller == nil {
                state.generation += 1
                let generation = state.generation
                state.poller = Task { [self] in await poll(generation) }
            }
            return (state.present, stream)
        }
    }

    /// How many follow the watch now (for tests).
    public var followerCount: Int { changes.subscriberCount }

    /// Whether the watch is looking for tags now.
    public var isWatching: Bool { state.withLock { $0.poller != nil } }

    private func poll(_ generation: Int) async {
        let clock = ContinuousClock()
        var next = clock.now
        let label = "the tag presence watch"
        // A tag at the edge of the field can miss one look: it is lost after two in a row.
        var misses = 0
        while !Task.isCancelled {
            let seen: NFCTag??
            do {
                switch try await turns.look(window: window, label: label) {
                case .tag(let tag):
                    misses = 0
                    seen = .some(tag)
                case .noTag:
                    misses += 1
                    seen = misses >= 2 ? .some(nil) : .none
                case .chipInUse: seen = .none
                }
            } catch let error as FieldHALError where error.kind == .malformedData || error.kind == .protocolError {
                // A tag answered but could not be read: something is in the field, and it
                // is not known which. The state stays as it was until a look settles it.
                seen = .none
            } catch {
                // No reader (a reload took it away) or a reader that failed: whatever was
                // in the field is no longer seen.
                seen = .some(nil)
            }
            if let seen { settle(seen, generation) }
            if stopIfUnfollowed(generation) { return }
            // The next look on the fixed schedule; a look that ran long skips the ticks it
            // overran rather than looking twice in a row.
            next += period
            let now = clock.now
            while next < now { next += period }
            do { try await Task.sleep(until: next, clock: clock) } catch { break }
        }
        _ = stopIfUnfollowed(generation, evenIfFollowed: true)
    }

    private func settle(_ seen: NFCTag?, _ generation: Int) {
        state.withLock { state in
            guard state.generation == generation else { return }
            let before = state.present
            if before?.uid == seen?.uid {
                // The same tag: keep what was read last (a write may have changed it).
                state.present = seen
                return
            }
            state.present = seen
            if let before {
                changes.yield(.lost(before))
                told?(.lost(before))
            }
            if let seen {
                changes.yield(.found(seen))
                told?(.found(seen))
            }
        }
    }

    /// With nobody following, the watch ends under the lock `watch()` takes, so a follower
    /// arriving now starts a new one rather than joining one that is ending.
    private func stopIfUnfollowed(_ generation: Int, evenIfFollowed: Bool = false) -> Bool {
        state.withLock { state in
            guard state.generation == generation, evenIfFollowed || changes.subscriberCount == 0 else { return false }
            state.poller = nil
            state.present = nil
            return true
        }
    }

    /// Ends the watch and every follower's stream.
    public func close() async {
        let poller = state.withLock { state in
            defer { state.poller = nil; state.present = nil; state.generation += 1 }
            return state.poller
        }
        poller?.cancel()
        await poller?.value
        changes.finish()
    }
}
