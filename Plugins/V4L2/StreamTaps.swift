#if V4L2
import FieldHAL
import FieldHALSystem
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// Everyone who shares the camera's one open stream. A V4L2 node streams to one reader at a
/// time, and a second open would be refused as busy, so whoever runs the stream — a
/// recording, or the preview loop — hands each frame to the others as it passes:
///
/// - stills waiting: each gets the next frame;
/// - preview viewers: each gets frames at its own rate until it says stop;
/// - recordings asked for while the preview loop runs ("guests"): the loop runs each on
///   the stream it has open, so evidence starts at once instead of waiting for the last
///   viewer to leave, and records at the running stream's size.
///
/// When a recording that opened the stream itself ends, its viewers are told the stream
/// ended and start the preview loop again (a gap of one open, about 0.1 s on vivid).
final class StreamTaps: Sendable {
    enum Serving: Sendable, Equatable {
        case none
        /// A recording opened the stream: stills and viewers ride along; a second recording waits its turn on the thread.
        case recording
        /// The preview loop opened it: recordings asked for meanwhile run on it.
        case preview
    }

    /// How a viewer's watch ended short of an error.
    enum WatchEnd: Sendable {
        /// The viewer said stop.
        case finished
        /// The stream it watched closed (a recording ended): watch again.
        case streamEnded
    }

    private struct Still {
        let id: Int
        let quality: Int
        let continuation: CheckedContinuation<Photo?, any Error>
    }

    private struct Viewer {
        let id: Int
        let request: PreviewRequest
        let frame: @Sendable (Photo) -> Bool
        let continuation: CheckedContinuation<WatchEnd, any Error>
        var lastFrameAt: ContinuousClock.Instant?
    }

    /// A recording waiting for the preview loop, type-erased: `run` resumes its caller.
    struct Guest: Sendable {
        let id: Int
        let run: @Sendable (V4L2Handle) -> Void
        /// Answers the caller with `error` instead (cancelled, or the stream failed first).
        let fail: @Sendable (any Error) -> Void
    }

    private struct State {
        var serving = Serving.none
        /// The preview loop is queued on the camera's thread or running there.
        var previewLoop = false
        var size: (width: Int, height: Int) = (0, 0)
        var stills: [Still] = []
        var viewers: [Viewer] = []
        var guests: [Guest] = []
        var runningGuest: Int?
        var nextId = 0

        /// The preview loop runs for someone: a viewer, or a recording in it. Once the last
        /// viewer has left, the loop only winds down (at its next frame), and whoever comes
        /// then opens the camera at its own size after it.
        var previewLive: Bool { previewLoop && (!viewers.isEmpty || !guests.isEmpty || runningGuest != nil) }

        mutating func id() -> Int {
            nextId += 1
            return nextId
        }
    }

    private let state = Mutex(State())

    var serving: Serving { state.withLock { $0.serving } }

    // MARK: Asked from any task

    /// The next frame of the running stream as a photo, or nil when nothing runs for
    /// anyone (or it ended first): the caller then opens the camera itself.
    func still(quality: Int) async throws -> Photo? {
        let id = state.withLock { $0.id() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Photo?, any Error>) in
                let queued = state.withLock { state in
                    guard state.serving == .recording || state.previewLive else { return false }
                    state.stills.append(Still(id: id, quality: quality, continuation: continuation))
                    return true
                }
                if !queued { continuation.resume(returning: nil) }
            }
        } onCancel: {
            let still = state.withLock { state -> Still? in
                guard let index = state.stills.firstIndex(where: { $0.id == id }) else { return nil }
                return state.stills.remove(at: index)
            }
            still?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Watches the running stream, or the preview loop's, which `startLoop` queues on the
    /// camera's thread when nothing runs (false: the thread is gone). Returns when `frame`
    /// says stop or the stream ends; throws the stream's failure or the task's cancellation.
    func watch(_ request: PreviewRequest, frame: @escaping @Sendable (Photo) -> Bool,
               startLoop: @escaping @Sendable () -> Bool) async throws -> WatchEnd {
        let id = state.withLock { $0.id() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<WatchEnd, any Error>) in
                let start = state.withLock { state in
                    state.viewers.append(Viewer(id: id, request: request, frame: frame, continuation: continuation))
                    guard state.serving == .none, !state.previewLoop else { return false }
                    state.previewLoop = true
                    return true
                }
                if start, !startLoop() {
                    fail(FieldHALError(.disconnected, subject: "camera", detail: "the camera has been closed"))
                }
            }
        } onCancel: {
            let viewer = state.withLock { state -> Viewer? in
                guard let index = state.viewers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.viewers.remove(at: index)
            }
            viewer?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Runs `job` in the preview loop, on its open stream, when the loop runs or is queued
    /// for a viewer; nil when it does not (the caller takes the camera's thread as usual). Cancelling the
    /// task signals `wakeup`, which ends the job's wait for a frame.
    func asGuest<T: Sendable>(_ job: @escaping @Sendable (V4L2Handle) throws -> T, wakeup: WakeupEvent) async throws -> T? {
        let id = state.withLock { $0.id() }
        let done = Mutex<CheckedContinuation<T?, any Error>?>(nil)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T?, any Error>) in
                done.withLock { $0 = continuation }
                let guest = Guest(id: id, run: { handle in
                    let result = Result { try job(handle) }
                    done.withLock { $0.take() }?.resume(with: result.map { Optional($0) })
                }, fail: { error in
                    done.withLock { $0.take() }?.resume(throwing: error)
                })
                let queued = state.withLock { state in
                    guard state.previewLive else { return false }
                    state.guests.append(guest)
                    return true
                }
                if !queued { done.withLock { $0.take() }?.resume(returning: nil) }
            }
        } onCancel: {
            let (waiting, running) = state.withLock { state -> (Guest?, Bool) in
                if let index = state.guests.firstIndex(where: { $0.id == id }) { return (state.guests.remove(at: index), false) }
                return (nil, state.runningGuest == id)
            }
            waiting?.fail(CancellationError())
            if running { wakeup.signal() }
        }
    }

    // MARK: On the camera's thread

    /// A stream of `width`x`height` now serves the taps.
    func beginServing(_ serving: Serving, width: Int, height: Int) {
        state.withLock { state in
            state.serving = serving
            state.size = (width, height)
        }
    }

    /// A recording's own stream closes: stills still waiting open the camera themselves,
    /// viewers start the preview loop again.
    func endRecording() {
        let (stills, viewers) = state.withLock { state in
            state.serving = .none
            defer { (state.stills, state.viewers) = ([], []) }
            return (state.stills, state.viewers)
        }
        for still in stills { still.continuation.resume(returning: nil) }
        for viewer in viewers { viewer.continuation.resume(returning: .streamEnded) }
    }

    /// The preview loop's next recording to run, marked running.
    func nextGuest() -> Guest? {
        state.withLock { state in
            guard !state.guests.isEmpty else { return nil }
            let guest = state.guests.removeFirst()
            state.runningGuest = guest.id
            return guest
        }
    }

    func guestEnded() {
        state.withLock { $0.runningGuest = nil }
    }

    /// What the preview loop should open: the first viewer's size; nil when nobody watches.
    func wantedSize() -> (width: Int, height: Int)? {
        state.withLock { state in state.viewers.first.map { ($0.request.width, $0.request.height) } }
    }

    /// Ends the preview loop when nobody watches and no recording waits (one step, so a
    /// viewer or a recording arriving now either is seen here or starts a new loop).
    /// Stills still waiting open the camera themselves.
    func endPreviewIfIdle() -> Bool {
        let stills: [Still]? = state.withLock { state in
            guard state.viewers.isEmpty, state.guests.isEmpty else { return nil }
            state.serving = .none
            state.previewLoop = false
            defer { state.stills = [] }
            return state.stills
        }
        guard let stills else { return false }
        for still in stills { still.continuation.resume(returning: nil) }
        return true
    }

    /// The stream failed: everyone waiting hears why, and the preview loop ends.
    func fail(_ error: any Error) {
        let (stills, viewers, guests) = state.withLock { state in
            state.serving = .none
            state.previewLoop = false
            defer { (state.stills, state.viewers, state.guests) = ([], [], []) }
            return (state.stills, state.viewers, state.guests)
        }
        for still in stills { still.continuation.resume(throwing: error) }
        for viewer in viewers { viewer.continuation.resume(throwing: error) }
        for guest in guests { guest.fail(error) }
    }

    /// Hands `frame` to the stills waiting and to the viewers it is due for; `jpeg` encodes
    /// it at a quality (once per quality: MJPEG passes through whatever the quality).
    func serve(width: Int, height: Int, jpeg: (Int) throws -> [UInt8]) {
        let now = ContinuousClock.now
        let (stills, due) = state.withLock { state -> ([Still], [Viewer]) in
            let stills = state.stills
            state.stills = []
            var due: [Viewer] = []
            for index in state.viewers.indices {
                let viewer = state.viewers[index]
                let interval = Duration.seconds(1) / viewer.request.framesPerSecond
                // Nine tenths of the interval: a 30 fps camera's frames then give a 10 fps
                // viewer every third frame, not every fourth when one arrives a hair early.
                if let last = viewer.lastFrameAt, now - last < interval * 9 / 10 { continue }
                state.viewers[index].lastFrameAt = now
                due.append(viewer)
            }
            return (stills, due)
        }
        guard !stills.isEmpty || !due.isEmpty else { return }
        var encoded: [Int: Result<[UInt8], any Error>] = [:]
        func bytes(_ quality: Int) -> Result<[UInt8], any Error> {
            if let done = encoded[quality] { return done }
            let result = Result { try jpeg(quality) }
            encoded[quality] = result
            return result
        }
        let at = Date()
        for still in stills {
            still.continuation.resume(with: bytes(still.quality).map { Photo(jpeg: $0, width: width, height: height, capturedAt: at) })
        }
        var finished: [Int] = []
        for viewer in due {
            switch bytes(viewer.request.quality) {
            case .success(let jpeg):
                if !viewer.frame(Photo(jpeg: jpeg, width: width, height: height, capturedAt: at)) { finished.append(viewer.id) }
            case .failure(let error):
                finished.append(viewer.id)
                remove(viewer.id)?.continuation.resume(throwing: error)
            }
        }
        for id in finished { remove(id)?.continuation.resume(returning: .finished) }
    }

    private func remove(_ id: Int) -> Viewer? {
        state.withLock { state in
            guard let index = state.viewers.firstIndex(where: { $0.id == id }) else { return nil }
            return state.viewers.remove(at: index)
        }
    }
}
#endif
