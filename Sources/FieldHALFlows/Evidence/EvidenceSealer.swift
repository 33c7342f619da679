import FieldHAL
import FieldHALSystem

/// The thread evidence is sealed on. Encrypting a segment of several megabytes and its
/// fsync are blocking work that must not hold a thread of Swift's cooperative pool, where
/// the audio, the video and the uploads beside them wait their turn. One thread for the
/// process, in the order items are handed to it (a recording's chain stays in order),
/// started by `prepare()` before anything depends on the verdict: the threads a process
/// shows must not tell a duress capture from a normal sign-in (docs/stealth.md), so the
/// daemon and the detached background run start it whatever the verdict.
public enum EvidenceSealer {
    static let thread = DeviceThread(name: "fieldhal-evidence-sealer")

    /// Starts the thread now (see above), and takes the descriptors held back for the
    /// pipeline's last words (`DescriptorReserve`); anything that seals does otherwise.
    public static func prepare() {
        _ = thread
        _ = DescriptorReserve.evidence
    }

    /// Runs `work` (an `EvidenceQueue.add`) on the sealer's thread.
    static func seal(_ work: @escaping @Sendable () throws -> EvidenceItem) async throws -> EvidenceItem {
        prepare()
        return try await thread.run(work)
    }
}
