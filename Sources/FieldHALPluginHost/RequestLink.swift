import FieldHAL
import FieldHALPluginProtocol
import Foundation
import Logging

/// A plugin process serving a capability that works by request (the NFC reader, the tag
/// emulator): started when the kit opens the capability and, after it fails, started again
/// by the next request once the backoff has passed (0.5 s after a failure, doubling to 30 s
/// while starts keep failing).
///
/// A request never waits long on a plugin that is down: within 2 s of the next start it
/// waits for that start; later it gets the failure at once (typed, naming the plugin, with
/// the tail of its stderr) and the time of the next start. A location plugin is kept
/// running instead (`ExternalLocation`): its stream has watchers whether they ask or not.
final class RequestLink: Sendable {
    let manifest: PluginManifest
    let capability: Capability
    let parameters: JSONValue
    let logger: Logger
    private let state = LockedValue(State())

    /// How long past a request's own bound the host waits for the plugin's answer before it
    /// calls the plugin hung (the plugin answers a `timeout` itself at the bound).
    static let grace = Duration.seconds(5)
    /// The longest remaining backoff a request waits through rather than failing at once.
    static let patience = Duration.seconds(2)

    private struct State {
        var session: PluginSession?
        /// Each session started gets a number; only the end of the current one counts.
        var generation = 0
        var current: Int?
        var starting: Task<PluginSession, any Error>?
        var failure: FieldHALError?
        var delay = Duration.milliseconds(500)
        var retryAt: ContinuousClock.Instant?
        var failedStarts = 0
        var closed = false
    }

    init(manifest: PluginManifest, capability: Capability, parameters: JSONValue, logger: Logger) {
        self.manifest = manifest
        self.capability = capability
        self.parameters = parameters
        self.logger = logger
    }

    /// A link whose plugin runs with the capability open, and the device's name for the
    /// kit (`NAME (plugin PLUGIN)`); or the error that says why not (the kit then reports
    /// the capability unavailable with it).
    static func started(_ manifest: PluginManifest, _ capability: Capability, _ parameters: PluginParameters,
                        logger: Logger) async throws -> (RequestLink, String) {
        let link = RequestLink(manifest: manifest, capability: capability, parameters: JSONValue(parameters.values), logger: logger)
        let (session, device) = try await link.connect()
        link.state.withLock { $0.session = session }
        return (link, "\(device) (plugin \(manifest.name))")
    }

    /// Sends a request to the plugin, starting it first when it is down. The plugin has
    /// `timeout` (at most a day) plus the grace to answer.
    func call(_ method: String, _ parameters: JSONValue, timeout: Duration,
              progress: (@Sendable (JSONValue) -> Void)? = nil) async throws -> JSONValue {
        let session = try await serving()
        return try await session.call(method, parameters, timeout: min(timeout, PluginProtocol.longestWait) + Self.grace, progress: progress)
    }

    func close() async {
        let (session, starting) = state.withLock { state in
            state.closed = true
            defer { state.session = nil; state.starting = nil }
            return (state.session, state.starting)
        }
        starting?.cancel()
        if let started = try? await starting?.value { await started.stop() }
        await session?.stop()
    }

    // MARK: - Starting

    private func connect() async throws -> (PluginSession, String) {
        let number = state.withLock { state -> Int in
            state.generation += 1
            state.current = state.generation
            return state.generation
        }
        let session = try await PluginSession.start(manifest, onEnd: { [weak self] error in self?.ended(error, session: number) })
        do {
            let opened = try await session.call("open", .object(["capability": .string(capability.rawValue), "parameters": parameters]),
                                                timeout: .seconds(10))
            return (session, opened["device"]?.string ?? manifest.name)
        } catch {
            await session.stop()
            throw error
        }
    }

    /// The session failed while it served: the next request starts another after the backoff.
    /// Heard from the session (`onEnd`) or noticed first by a request (a session resumes its
    /// callers before it calls `onEnd`): whichever comes first retires it, once.
    private func ended(_ error: FieldHALError, session number: Int) {
        guard let delay = state.withLock({ Self.retire(error, session: number, in: &$0) }) else { return }
        said(error, delay)
    }

    private static func retire(_ error: FieldHALError, session number: Int, in state: inout State) -> Duration? {
        guard state.current == number, !state.closed else { return nil }
        state.session = nil
        state.current = nil
        state.failure = error
        state.retryAt = .now + state.delay
        return state.delay
    }

    private func said(_ error: FieldHALError, _ delay: Duration) {
        logger.error("\(error) — FieldHAL starts it again at the next \(capability) request from \(delay.secondsDescription) on")
    }

    private enum Step {
        case ready(PluginSession)
        case join(Task<PluginSession, any Error>)
        case wait(Duration)
        case fail(FieldHALError)
        case retired(FieldHALError, Duration)
    }

    /// The serving session: the current one, the one being started, or a new one.
    private func serving() async throws -> PluginSession {
        while true {
            let step = state.withLock { state -> Step in
                if state.closed { return .fail(.cancelled("\(capability) plugin \(manifest.name)")) }
                if let session = state.session {
                    guard let error = session.ended else { return .ready(session) }
                    if let number = state.current, let delay = Self.retire(error, session: number, in: &state) { return .retired(error, delay) }
                }
                if let starting = state.starting { return .join(starting) }
                if let retryAt = state.retryAt, retryAt > .now {
                    let left = retryAt - .now
                    if left <= Self.patience { return .wait(left) }
                    let failure = state.failure ?? FieldHALError(.unavailable, subject: "plugin \(manifest.name)", detail: "is down")
                    return .fail(FieldHALError(failure.kind, subject: failure.subject, detail: failure.detail,
                                               advice: "FieldHAL starts the plugin again in \(left.secondsDescription)"))
                }
                let task = Task { [self] in try await restart() }
                state.starting = task
                return .join(task)
            }
            switch step {
            case .ready(let session): return session
            case .fail(let error): throw error
            case .retired(let error, let delay): said(error, delay)
            case .wait(let left):
                do { try await Task.sleep(for: left) } catch { throw FieldHALError.cancelled("\(capability) plugin \(manifest.name)") }
            case .join(let task):
                let session = try await Self.cancellably(task)
                if session.ended == nil { return session }
            }
        }
    }

    /// One start after a failure; its outcome goes to the state and the journal.
    private func restart() async throws -> PluginSession {
        do {
            let (session, _) = try await connect()
            let attempts = state.withLock { state -> Int in
                defer {
                    state.failedStarts = 0
                    state.delay = .milliseconds(500)
                    state.failure = nil
                    state.retryAt = nil
                    state.starting = nil
                }
                state.session = session
                return state.failedStarts + 1
            }
            if !state.value.closed {
                logger.notice("plugin \(manifest.name) serves \(capability) again (\(attempts == 1 ? "restarted" : "after \(attempts) attempts"))")
            }
            return session
        } catch {
            let failure = (error as? FieldHALError) ?? FieldHALError(.unavailable, subject: "plugin \(manifest.name)", detail: "\(error)")
            let (attempts, next) = state.withLock { state -> (Int, Duration) in
                state.failedStarts += 1
                state.delay = min(state.delay * 2, .seconds(30))
                state.failure = failure
                state.retryAt = .now + state.delay
                state.starting = nil
                return (state.failedStarts, state.delay)
            }
            if !state.value.closed {
                logger.warning("\(failure) — restart \(attempts) failed; the next at a request from \(next.secondsDescription) on")
            }
            throw failure
        }
    }

    /// Waits for `task` unless the caller is cancelled first (the start goes on for others).
    private static func cancellably<Value: Sendable>(_ task: Task<Value, any Error>) async throws -> Value {
        let waiter = LockedValue<CheckedContinuation<Value, any Error>?>(nil)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                waiter.withLock { $0 = continuation }
                if Task.isCancelled, let waiting = waiter.withLock({ $0.take() }) {
                    waiting.resume(throwing: FieldHALError.cancelled("a plugin's start"))
                    return
                }
                Task {
                    let result = await task.result
                    waiter.withLock { $0.take() }?.resume(with: result)
                }
            }
        } onCancel: {
            waiter.withLock { $0.take() }?.resume(throwing: FieldHALError.cancelled("a plugin's start"))
        }
    }
}
