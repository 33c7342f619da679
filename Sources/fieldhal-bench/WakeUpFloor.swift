import FieldHAL
import FieldHALComposition
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What one wake-up through a socket costs on this machine: a thread blocked in `read` on
/// a Unix socket pair, woken by a write from another thread after the line has been idle
/// as long as between two fixes. Every path the benchmarks compare pays a whole number of
/// these (a second process on a fix's way pays at least one more), so this, measured in
/// the same run, is the floor under any ratio between them: a goal below it cannot be met
/// by any design that keeps the second process, on this machine.
enum WakeUpFloor {
    /// The median and 95th percentile of the write → the reader holding the bytes, in ms,
    /// over `samples` wake-ups `idle` apart.
    static func measure(samples: Int = 200, idle: Duration = .milliseconds(20)) async throws -> (medianMs: Double, p95Ms: Double) {
        var ends: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw SystemError.io("socketpair", subject: "bench: wake-up floor")
        }
        let (writer, reader) = (ends[0], ends[1])
        let latencies = LockedValue<[Double]>([])
        // The reader's own thread, blocked in read(2) like a device thread; its end is awaited,
        // not waited for on a thread of the pool.
        let reading = Task {
            await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
                let thread = Thread {
                    var stamp: UInt64 = 0
                    while withUnsafeMutableBytes(of: &stamp, { read(reader, $0.baseAddress, 8) }) == 8 {
                        let now = NFCBench.monotonicNanoseconds()
                        latencies.withLock { $0.append(Double(now - stamp) / 1e6) }
                    }
                    finished.resume()
                }
                thread.name = "wake-up floor"
                thread.start()
            }
        }
        defer { close(reader) }
        var failure: (any Error)?
        do {
            for _ in 0..<samples {
                try await Task.sleep(for: idle)
                var stamp = NFCBench.monotonicNanoseconds()
                _ = withUnsafeBytes(of: &stamp) { write(writer, $0.baseAddress, 8) }
            }
        } catch {
            failure = error
        }
        close(writer)  // the reader sees the end and stops
        await reading.value
        if let failure { throw failure }
        let measured = latencies.value
        guard measured.count >= samples / 2 else {
            throw FieldHALError(.io, subject: "bench: wake-up floor", detail: "only \(measured.count) of \(samples) wake-ups were read")
        }
        return (GPSBench.percentile(measured, 0.5), GPSBench.percentile(measured, 0.95))
    }
}
