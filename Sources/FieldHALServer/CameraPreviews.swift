import FieldHAL
import Synchronization

/// The live previews the daemon runs, one capture per camera however many pages watch it:
/// the first viewer's request starts it, each frame goes to every viewer (a slow one misses
/// frames, never holds the others back), and the last viewer to leave stops it.
final class CameraPreviews: Sendable {
    private struct Running {
        let id: Int
        let frames: Broadcaster<Photo>
        var viewers: Int
        let task: Task<Void, Never>
        let request: PreviewRequest
    }

    private let running = Mutex<[String: Running]>([:])
    private let started = Atomic<Int>(0)

    /// How many captures have started: what `ten viewers, one capture` is checked by.
    var capturesStarted: Int { started.load(ordering: .relaxed) }

    /// A viewer of `device`'s preview: its frames (the running capture's, at its size and
    /// rate, when one runs) and the call that says the viewer left.
    func watch(_ device: String, camera: any Camera, request: PreviewRequest)
        -> (frames: AsyncThrowingStream<Photo, any Error>, request: PreviewRequest, leave: @Sendable () -> Void) {
        running.withLock { running in
            if var current = running[device] {
                current.viewers += 1
                running[device] = current
                let id = current.id
                return (current.frames.subscribe(), current.request, { [self] in leave(device, id: id) })
            }
            let id = started.wrappingAdd(1, ordering: .relaxed).newValue
            // Two frames kept for a viewer that is behind: it gets the newest, not a queue.
            let frames = Broadcaster<Photo>(bufferLimit: 2)
            let subscription = frames.subscribe()
            let task = Task { [self] in
                do {
                    try await camera.preview(request) { frame in
                        frames.yield(frame)
                        return !Task.isCancelled
                    }
                    frames.finish()
                } catch {
                    frames.finish(throwing: error)
                }
                self.running.withLock { running in if running[device]?.id == id { running[device] = nil } }
            }
            running[device] = Running(id: id, frames: frames, viewers: 1, task: task, request: request)
            return (subscription, request, { [self] in leave(device, id: id) })
        }
    }

    private func leave(_ device: String, id: Int) {
        let stopped: Task<Void, Never>? = running.withLock { running in
            guard var current = running[device], current.id == id else { return nil }
            current.viewers -= 1
            if current.viewers > 0 {
                running[device] = current
                return nil
            }
            running[device] = nil
            return current.task
        }
        stopped?.cancel()
    }
}
