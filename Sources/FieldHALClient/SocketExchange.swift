import FieldHAL
import FieldHALAPI
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One request to the daemon on its Unix socket (`DaemonConnection`), made on a thread of its
/// own — the same socket code and reader as the event stream and the front: one HTTP/1.1
/// client for the API. The answer's parts reach the caller's task as they arrive (a still's
/// bytes, an enrollment's stages); the thread stops when the caller stops listening.
enum SocketExchange {
    /// The answer's parts, or the failure: the connection refused (`unavailable`, naming the
    /// socket), the daemon gone mid-answer (`disconnected`), no whole answer by `deadline`
    /// (`timeout`).
    static func parts(socketPath: String, request: [UInt8], subject: String,
                      deadline: ContinuousClock.Instant?) -> AsyncThrowingStream<HTTPResponseReader.Part, any Error> {
        let (parts, answer) = AsyncThrowingStream.makeStream(of: HTTPResponseReader.Part.self)
        let stop: WakeupEvent
        do {
            stop = try WakeupEvent()
        } catch {
            answer.finish(throwing: error)
            return parts
        }
        answer.onTermination = { _ in stop.signal() }
        let thread = DeviceThread(name: "fieldhal-call")
        thread.submit {
            do {
                try DaemonConnection.exchange(socketPath: socketPath, request: request, subject: subject, deadline: deadline, stop: stop) { answer.yield($0) }
                answer.finish()
            } catch {
                answer.finish(throwing: error)
            }
        }
        thread.stop()
        return parts
    }
}
