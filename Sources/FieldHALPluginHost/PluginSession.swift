import FieldHAL
import FieldHALPluginProtocol
import FieldHALSystem
import Foundation
import Synchronization

/// A plugin process kept running to serve a capability: requests from any task, answers
/// and notifications (stream items) as they come.
///
/// All I/O happens on one `DeviceThread` of the session's own, in a loop waiting in `poll`
/// on the channel, the process's exit and a `WakeupEvent`: a caller queues its request,
/// signals the wake-up and suspends; the loop writes, reads, and resumes the caller when its
/// answer comes or its bound passes. Nothing blocks a task. When the process fails — ends,
/// hangs past a request's bound (it is killed), or writes garbage — every waiting call gets
/// that typed error, `onEnd` hears it once, and the session is over (the owner starts a new
/// one, with backoff).
public final class PluginSession: Sendable {
    public let manifest: PluginManifest
    private let thread: DeviceThread
    private let wakeup: WakeupEvent
    private let state = Mutex(State())
    /// How many cancelled requests' answers are remembered as expected (see `State.late`).
    private static let lateLimit = 1024
    private let onNotification: @Sendable (String, JSONValue) -> Void
    private let onEnd: @Sendable (FieldHALError) -> Void

    private struct Pending {
        var continuation: CheckedContinuation<Answer, any Error>
        var method: String
        var timeout: Duration
        var deadline: ContinuousClock.Instant
        /// Where the request's `$/progress` notifications go (an enrollment's stages, a
        /// recording's segments), with the descriptors each names.
        var progress: Progress?
        /// What the plugin may still be using for this request (see `call`'s `holding`).
        var held: (any Sendable)?
    }

    private struct State {
        var outgoing: [OutgoingMessage] = []
        var pending: [Int64: Pending] = [:]
        /// What cancelled requests hold until the plugin answers them (or the session ends).
        var abandoned: [Int64: any Sendable] = [:]
        /// Requests whose callers stopped waiting (cancelled) while the plugin may still
        /// answer them: their answers are dropped. Any other answer not awaited is a stray.
        /// A plugin may answer a cancel with nothing, so the set is bounded: the oldest go,
        /// and an answer at or below `lateFloor` (the newest that went) is dropped too.
        var late: Set<Int64> = []
        var lateFloor: Int64 = 0
        var nextIdentifier: Int64 = 1
        var stopping = false
        var ended: FieldHALError?
        var endWaiters: [CheckedContinuation<Void, Never>] = []
        var loopDone = false
    }

    private init(manifest: PluginManifest, wakeup: WakeupEvent,
                 onNotification: @escaping @Sendable (String, JSONValue) -> Void,
                 onEnd: @escaping @Sendable (FieldHALError) -> Void) {
        self.manifest = manifest
        self.wakeup = wakeup
        self.thread = DeviceThread(name: "fieldhal-plugin-\(manifest.name)")
        self.onNotification = onNotification
        self.onEnd = onEnd
    }

    /// Starts the plugin and runs the handshake (checked against the manifest as
    /// `fieldhal plugin check` does). Notifications go to `onNotification` (on the
    /// session's thread: keep it short); `onEnd` hears once why the session ended (not
    /// after `stop()`).
    public static func start(_ manifest: PluginManifest, environment: [String: String] = [:],
                             onNotification: @escaping @Sendable (String, JSONValue) -> Void = { _, _ in },
                             onEnd: @escaping @Sendable (FieldHALError) -> Void = { _ in }) async throws -> PluginSession {
        if let refusal = PluginProtocol.refusal(of: manifest.protocolVersion, plugin: manifest.name) { throw refusal }
        let session = PluginSession(manifest: manifest, wakeup: try WakeupEvent(), onNotification: onNotification, onEnd: onEnd)
        session.thread.submit { session.serve(environment) }
        do {
            let start = ContinuousClock.now
            let answer = try await session.call("initialize", PluginCheck.initializeParameters, timeout: PluginCheck.handshakeTimeout)
            let handshake = try PluginCheck.read(answer, start: start, manifest: manifest)
            try PluginCheck.compare(handshake, with: manifest)
        } catch {
            await session.stop()
            throw error
        }
        return session
    }

    /// Hears a request's `$/progress` steps, each with the descriptors it names (since 1.5: a
    /// recording's segment in a sealed memfd), on the session's thread: keep it short.
    public typealias Progress = @Sendable (_ value: JSONValue, _ descriptors: [OwnedDescriptor]) -> Void

    /// A request's result and the descriptors it names (`"fds"`), in order.
    public struct Answer: Sendable {
        public var result: JSONValue
        public var descriptors: [OwnedDescriptor]
    }

    /// Sends a request; returns its result, or throws the plugin's error, a `timeout` (the
    /// plugin is then killed: a hang ends the session), or `cancelled` when the calling
    /// task is cancelled (the plugin is told with `$/cancel`). The plugin's `$/progress`
    /// notifications for this request go to `progress`, in order, before its answer.
    public func call(_ method: String, _ parameters: JSONValue = .object([:]), timeout: Duration,
                     progress: (@Sendable (JSONValue) -> Void)? = nil) async throws -> JSONValue {
        var steps: Progress?
        if let progress { steps = { value, _ in progress(value) } }
        return try await call(method, parameters, descriptors: [], timeout: timeout, progress: steps).result
    }

    /// `call` with descriptors beside the request (`parameters` names how many in
    /// `"fds"`; they are the session's now and closed once sent), answered with the
    /// descriptors the answer names. `holding` is kept until the plugin has answered, even
    /// when the caller stops waiting first: a cancelled caller returns at once, while the
    /// plugin may still be writing into a directory it was given (a recording's), which
    /// is removed when the last holder lets go.
    public func call(_ method: String, _ parameters: JSONValue, descriptors: [OwnedDescriptor], timeout: Duration,
                     progress: Progress? = nil, holding: (any Sendable)? = nil) async throws -> Answer {
        let identifier = state.withLock { state -> Int64 in
            defer { state.nextIdentifier += 1 }
            return state.nextIdentifier
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
                let refused = state.withLock { state -> FieldHALError? in
                    if let ended = state.ended { return ended }
                    if Task.isCancelled { return .cancelled("plugin \(manifest.name)") }
                    if state.stopping { return .cancelled("plugin \(manifest.name)") }
                    state.pending[identifier] = Pending(continuation: continuation, method: method, timeout: timeout,
                                                        deadline: .now + timeout, progress: progress, held: holding)
                    state.outgoing.append(OutgoingMessage(PluginProtocol.request(identifier, method, parameters), descriptors: descriptors))
                    return nil
                }
                if let refused { continuation.resume(throwing: refused) } else { wakeup.signal() }
            }
        } onCancel: {
            let waiting = state.withLock { state -> Pending? in
                guard let pending = state.pending.removeValue(forKey: identifier) else { return nil }
                if state.ended == nil && !state.stopping {
                    state.late.insert(identifier)
                    if state.late.count > Self.lateLimit, let oldest = state.late.min() {
                        state.late.remove(oldest)
                        state.lateFloor = max(state.lateFloor, oldest)
                    }
                    if let held = pending.held { state.abandoned[identifier] = held }
                    state.outgoing.append(OutgoingMessage(PluginProtocol.notification("$/cancel", .object(["id": .integer(identifier)]))))
                }
                return pending
            }
            waiting?.continuation.resume(throwing: FieldHALError.cancelled("plugin \(manifest.name)"))
            wakeup.signal()
        }
    }

    /// Sends a notification (no answer). Dropped once the session has ended.
    public func notify(_ method: String, _ parameters: JSONValue = .object([:])) {
        state.withLock { state in
            guard state.ended == nil, !state.stopping else { return }
            state.outgoing.append(OutgoingMessage(PluginProtocol.notification(method, parameters)))
        }
        wakeup.signal()
    }

    /// Why the session ended, once it has.
    public var ended: FieldHALError? { state.withLock { $0.ended } }

    /// Stops the plugin (`shutdown`, `exit`, SIGKILL after 2 s) and returns when it is gone.
    public func stop() async {
        state.withLock { $0.stopping = true }
        wakeup.signal()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state -> Bool in
                if state.loopDone { return true }
                state.endWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
        thread.stop()
    }

    // MARK: - The loop, on the session's thread

    private func serve(_ environment: [String: String]) {
        var failure: FieldHALError?
        do {
            let process = try PluginProcess(manifest, wakeup: wakeup, environment: environment)
            failure = run(process)
            if failure == nil { process.stop() } else { process.kill() }
        } catch {
            failure = error
        }
        let (pending, waiters, report) = state.withLock { state in
            let ending = failure ?? .cancelled("plugin \(manifest.name)")
            state.ended = ending
            state.loopDone = true
            defer { state.pending = [:]; state.endWaiters = []; state.outgoing = [] }
            // Each waiting caller holds its own reference to what it passed (see dispatch).
            let pending = state.pending.values.map { waiting in
                var waiting = waiting
                waiting.held = nil
                return waiting
            }
            return (pending, state.endWaiters, failure != nil && !state.stopping)
        }
        // The plugin has gone: nothing it was given is in use any more.
        let released = state.withLock { state in
            defer { state.abandoned = [:] }
            return state.abandoned
        }
        withExtendedLifetime(released) {}
        let ending = failure ?? .cancelled("plugin \(manifest.name)")
        for waiting in pending { waiting.continuation.resume(throwing: ending) }
        // The thread ends after this job whether or not anyone calls stop().
        thread.stop()
        if report { onEnd(ending) }
        for waiter in waiters { waiter.resume() }
    }

    /// Serves until `stop()` (nil) or the plugin fails (its error).
    private func run(_ process: PluginProcess) -> FieldHALError? {
        var unsent: [OutgoingMessage] = []
        while true {
            let (more, stopping, deadline) = state.withLock { state in
                defer { state.outgoing = [] }
                return (state.outgoing, state.stopping, state.pending.values.map(\.deadline).min())
            }
            if stopping { return nil }
            do {
                unsent += more
                try process.send(&unsent, doing: "writing to the plugin")
                switch try process.next(until: deadline ?? .now + .seconds(3600), doing: "serving", writing: !unsent.isEmpty) {
                case .message(let message, let descriptors):
                    if let fault = dispatch(message, descriptors, process) { return fault }
                case .writable, .woken: continue
                case .deadline:
                    let expired = state.withLock { state in
                        state.pending.first { $0.value.deadline <= .now }.map { ($0.key, $0.value) }
                    }
                    if let (_, waiting) = expired {
                        // A plugin that hangs past a bound is stopped: its answer would come to
                        // nobody, and whatever it holds is better released.
                        return process.hang(waiting.method, waiting.timeout)
                    }
                }
            } catch {
                return error
            }
        }
    }

    /// Hands a message to whoever waits for it; a stray answer is the plugin's fault, which
    /// ends the session.
    private func dispatch(_ message: JSONValue, _ descriptors: [OwnedDescriptor], _ process: PluginProcess) -> FieldHALError? {
        guard let id = message["id"], id != .null else {
            guard let method = message["method"]?.string else { return nil }
            let parameters = message["params"] ?? .null
            if method == PluginProtocol.progress {
                // A step of a running request (on this thread, before its answer is read);
                // one for a request no longer waiting is dropped.
                if let request = parameters["id"]?.integer, let value = parameters["value"],
                   let progress = state.withLock({ $0.pending[request]?.progress }) {
                    progress(value, descriptors)
                }
                return nil
            }
            onNotification(method, parameters)
            return nil
        }
        // A message with an id and a method is a request: the host serves none (a plugin
        // asks nothing of it), so it is not an answer and not a stray one either.
        guard message["method"] == nil else { return nil }
        guard let identifier = id.integer else { return process.stray(id) }
        // A cancelled call's holdings go now that the plugin is done with them (here, not
        // under the lock: letting go of a recording's directory removes it).
        let (waiting, released, late) = state.withLock { state -> (Pending?, (any Sendable)?, Bool) in
            var waiting = state.pending.removeValue(forKey: identifier)
            let late = waiting == nil && (state.late.remove(identifier) != nil || identifier <= state.lateFloor)
            // The caller, still waiting, holds its own reference: what it holds goes when
            // the caller is done with it, not a moment later on this thread.
            waiting?.held = nil
            return (waiting, state.abandoned.removeValue(forKey: identifier), late)
        }
        withExtendedLifetime(released) {}
        guard let waiting else {
            // The answer to a call that was cancelled is dropped; any other is a stray.
            return late ? nil : process.stray(id)
        }
        do {
            waiting.continuation.resume(returning: Answer(result: try process.result(of: message, method: waiting.method), descriptors: descriptors))
        } catch {
            waiting.continuation.resume(throwing: error)
        }
        return nil
    }
}
