import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A few descriptors held back for the evidence pipeline's last words (issue 41): when a
/// capture fails because the process has run out of descriptors, the error item that says
/// so and the incident's manifest still need files of their own. Without the reserve they
/// fail the same way, and the recording ends in a silent gap.
///
/// The descriptors are `/dev/null`, taken once when the capture machinery starts (by
/// `EvidenceSealer.prepare()` or the first capture) and held for the process's life, the
/// same in every mode. A last word that fails is tried once more with them given back;
/// then they are taken again, as many as the process can.
final class DescriptorReserve: Sendable {
    static let evidence = DescriptorReserve(count: 8)

    /// Adding one item holds at most four at once: its payload, the claim on it, the item
    /// file and the folder synced after it. Twice that lets two kinds end together.
    let count: Int
    private let held: Mutex<[Int32]>

    init(count: Int) {
        self.count = count
        held = Mutex([])
        refill()
    }

    var available: Int { held.withLock { $0.count } }

    /// Runs `work`; when it fails, gives the reserve back to the process and runs it once
    /// more. Only for work that says what went wrong: a retry after the reserve has gone to
    /// the work it was for would only hide the next failure.
    func lastWord<T>(_ work: () throws -> T) throws -> T {
        do {
            return try work()
        } catch {
            release()
            defer { refill() }
            return try work()
        }
    }

    private func release() {
        held.withLock { descriptors in
            for descriptor in descriptors { close(descriptor) }
            descriptors.removeAll()
        }
    }

    private func refill() {
        held.withLock { descriptors in
            while descriptors.count < count {
                let descriptor = open("/dev/null", O_RDONLY | O_CLOEXEC)
                guard descriptor >= 0 else { return }
                descriptors.append(descriptor)
            }
        }
    }
}
