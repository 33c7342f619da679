import FieldHAL
import FieldHALSystem
import SystemPackage
import NIOCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// An event stream's connection written directly, from whichever thread has the event: a
/// fix goes out from the receiver's thread in the same turn that read it from gpsd.
///
/// Why: through SwiftNIO a fix woke the connection's event loop to be written, a second
/// wake-up in the daemon on every fix's way; it was most of what the daemon added to a
/// fix's latency (issue 20: the event stream against the in-process `watch()`). SwiftNIO
/// has no write from outside its loop, so once the response's head and first bytes are out
/// and nothing is left in SwiftNIO's buffers, the stream takes the duplicate of the
/// connection's descriptor that the listener kept when it handed the connection to SwiftNIO
/// (`UnixSocketListener`), and writes the rest of the body (HTTP/1.1 chunks) itself. The
/// connection stays SwiftNIO's for reading: it sees the client go and closes its own
/// descriptor, and the stream then ends.
///
/// Writes never block: the socket is non-blocking (the listener accepted it so), what the kernel
/// does not take waits here and goes out first on the next write or on `flushWhenStalled`.
/// A client that leaves `pendingLimit` bytes unread is let go, as gpsd lets a slow client
/// go: it reconnects and starts from the state of now.
final class EventStreamSocket: Sendable {
    /// Thrown by a response whose body this wrote, so that the server closes the connection
    /// instead of ending the response itself.
    struct HandedOver: Error {}

    /// What may wait for a client that reads slowly: about a thousand fixes.
    static let pendingLimit = 256 * 1024

    private struct State {
        var descriptor: Int32
        var pending: [UInt8] = []
        var ended = false
        var waiter: CheckedContinuation<Void, Never>?
        /// Set by `endLocked`: the waiter to resume and the stall stream to finish once the
        /// lock is released (`locked`).
        var letGo: (waiter: CheckedContinuation<Void, Never>?, stalls: Bool)?
    }

    private let state: Mutex<State>
    private let stalls: AsyncStream<Void>.Continuation
    /// Yields when a write leaves bytes the kernel did not take (for `flushWhenStalled`).
    private let stalled: AsyncStream<Void>

    /// Takes `descriptor`, a connected stream socket of its own (a duplicate), closed at `end`.
    init(descriptor: Int32) {
        state = Mutex(State(descriptor: descriptor))
        (stalled, stalls) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    deinit {
        state.withLock { state in
            if state.descriptor >= 0 { close(state.descriptor) }
        }
    }

    /// The stream over `channel` from now on, written directly: nil when the listener did
    /// not accept the connection (the web door's, which SwiftNIO accepts), or SwiftNIO still
    /// holds bytes for it (a client that reads slowly): then the caller keeps writing through
    /// SwiftNIO. Must run on the channel's event loop, after the response's first write has
    /// returned, so that nothing written before can come after what this writes.
    static func takeOver(_ channel: any Channel, from adopted: AdoptedConnections) -> EventStreamSocket? {
        guard channel.eventLoop.inEventLoop, let options = channel.syncOptions,
              (try? options.getOption(.bufferedWritableBytes)) == 0,
              let descriptor = adopted.take(channel) else { return nil }
        return EventStreamSocket(descriptor: descriptor)
    }

    /// One event: an HTTP/1.1 chunk holding `text` (a whole Server-Sent Event). False when the
    /// stream has ended (the client went, or was too slow).
    @discardableResult
    func send(_ text: String) -> Bool {
        send(chunk: Self.chunk(text))
    }

    /// `send` of an already framed chunk (`chunk(_:)`): a fix framed once for every follower.
    @discardableResult
    func send(chunk: [UInt8]) -> Bool {
        let (open, stalledNow) = locked { state -> (Bool, Bool) in
            guard !state.ended else { return (false, false) }
            if state.pending.isEmpty {
                let sent = Self.write(chunk[...], to: state.descriptor)
                guard sent >= 0 else {
                    endLocked(&state)
                    return (false, false)
                }
                if sent == chunk.count { return (true, false) }
                state.pending.append(contentsOf: chunk[sent...])
            } else {
                state.pending.append(contentsOf: chunk)
                guard flushLocked(&state) else { return (false, false) }
            }
            if state.pending.count > Self.pendingLimit {
                endLocked(&state)
                return (false, false)
            }
            return (true, !state.pending.isEmpty)
        }
        if stalledNow { stalls.yield() }
        return open
    }

    /// While the stream lasts: each time a write leaves bytes behind, retries every
    /// `interval` until they are out (or the stream ends). Cancel the task to stop.
    func flushWhenStalled(every interval: Duration = .milliseconds(10)) async {
        for await _ in stalled {
            while true {
                do { try await Task.sleep(for: interval) } catch { return }
                let done = locked { state -> Bool in
                    guard !state.ended else { return true }
                    return !flushLocked(&state) || state.pending.isEmpty
                }
                if done { break }
            }
        }
    }

    /// Ends the stream: with the last chunk when `cleanly` (the client reads a whole
    /// response), then the descriptor is closed. Only the first call counts.
    func end(cleanly: Bool) {
        locked { state in
            guard !state.ended else { return }
            // A stream that cannot write its last chunk now is cut: the client sees a
            // response that did not end, and reconnects.
            if cleanly && flushLocked(&state) && state.pending.isEmpty {
                let last: [UInt8] = Array("0\r\n\r\n".utf8)
                _ = Self.write(last[...], to: state.descriptor)
            }
            endLocked(&state)
        }
    }

    /// Returns when the stream has ended (at once if it has).
    func ended() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.ended { return true }
                state.waiter = waiter
                return false
            }
            if now { waiter.resume() }
        }
    }

    var hasEnded: Bool { state.withLock { $0.ended } }

    private func endLocked(_ state: inout State) {
        state.ended = true
        state.pending = []
        if state.descriptor >= 0 {
            close(state.descriptor)
            state.descriptor = -1
        }
        // Not resumed here: resuming takes the Swift runtime's lock on the waiting task,
        // and a cancellation handler that calls `end` holds that lock while it waits for
        // this one (a CI run's host tests deadlocked so, 2026-11-29).
        state.letGo = (state.letGo?.waiter ?? state.waiter, true)
        state.waiter = nil
    }

    /// `body` under the lock; whatever it ended is let go after the lock is released.
    private func locked<T>(_ body: (inout State) -> T) -> T {
        let (result, letGo) = state.withLock { state -> (T, (waiter: CheckedContinuation<Void, Never>?, stalls: Bool)?) in
            let result = body(&state)
            defer { state.letGo = nil }
            return (result, state.letGo)
        }
        if let letGo {
            letGo.waiter?.resume()
            if letGo.stalls { stalls.finish() }
        }
        return result
    }

    /// Writes what is pending; false when the connection failed (the stream has then ended).
    private func flushLocked(_ state: inout State) -> Bool {
        guard !state.pending.isEmpty else { return true }
        let sent = Self.write(state.pending[...], to: state.descriptor)
        guard sent >= 0 else {
            endLocked(&state)
            return false
        }
        state.pending.removeFirst(sent)
        return true
    }

    /// Bytes the kernel took (0 when it took none for now), or -1 when the connection failed.
    private static func write(_ bytes: ArraySlice<UInt8>, to descriptor: Int32) -> Int {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            switch SystemCall.attempt({ bytes[offset...].withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } }) {
            case .success(let sent): offset += sent
            case .failure(.resourceTemporarilyUnavailable): return offset - bytes.startIndex  // full for now
            case .failure: return -1
            }
        }
        return offset - bytes.startIndex
    }

    /// `text` as one HTTP/1.1 chunk: its length in hex, the bytes, CRLF.
    static func chunk(_ text: String) -> [UInt8] {
        let body = text.utf8
        var bytes: [UInt8] = []
        bytes.reserveCapacity(body.count + 12)
        bytes.append(contentsOf: String(body.count, radix: 16).utf8)
        bytes.append(contentsOf: [13, 10])
        bytes.append(contentsOf: body)
        bytes.append(contentsOf: [13, 10])
        return bytes
    }
}
