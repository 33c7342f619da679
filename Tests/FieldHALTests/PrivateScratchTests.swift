@testable import FieldHAL
import FieldHALSystem
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The daemon's scratch folder and the removal of what dead daemons left there (issue 41):
/// a folder swapped for a symlink mid-delete once made the daemon delete its own vault key.
@Suite struct PrivateScratchTests {
    /// A state directory with a "vault key" beside the scratch base.
    func stateWithKey() throws -> (state: String, key: String, base: String) {
        let state = NSTemporaryDirectory() + "fieldhal-scratch-\(UUID().uuidString)"
        try StateDirectory(path: state).prepare()
        let key = state + "/vault.key"
        try Data("secret".utf8).write(to: URL(fileURLWithPath: key))
        let base = PrivateScratch.base(stateDirectory: state, environment: [:])
        try PrivateScratch.prepare(base)
        return (state, key, base)
    }

    /// A pid no process has: its folder is stale.
    static let deadPID = "2147480000"

    @Test func theBaseIsTheRuntimeDirectoryUnderTheUnitElseInsideTheStateDirectory() {
        #expect(PrivateScratch.base(stateDirectory: "/var/lib/fieldhal", environment: ["RUNTIME_DIRECTORY": "/run/fieldhal"]) == "/run/fieldhal/scratch")
        #expect(PrivateScratch.base(stateDirectory: "/var/lib/fieldhal", environment: [:]) == "/var/lib/fieldhal/scratch")
    }

    @Test func symlinksLeftInTheScratchAreRemovedNeverFollowed() throws {
        let (state, key, base) = try stateWithKey()
        // A dead daemon's folder that is a symlink to the state directory, and one holding a
        // symlink to it: both go, the state directory and its key stay.
        #expect(symlink(state, base + "/" + Self.deadPID) == 0)
        try FileManager.default.createDirectory(atPath: base + "/2147480001/inner", withIntermediateDirectories: true)
        #expect(symlink(state, base + "/2147480001/inner/link") == 0)
        #expect(symlink(key, base + "/2147480001/key-link") == 0)
        let mine = base + "/\(getpid())"
        try PrivateScratch.prepare(mine)
        let removed = PrivateScratch.removeStale(in: base) { Int32($0).map { kill($0, 0) != 0 && errno == ESRCH } ?? false }
        #expect(removed == 2)
        #expect(FileManager.default.fileExists(atPath: key))
        #expect(try String(contentsOfFile: key, encoding: .utf8) == "secret")
        #expect(try FileManager.default.contentsOfDirectory(atPath: base) == ["\(getpid())"], "a live daemon's folder stays")
    }

    /// The race itself: while the removal runs, another thread swaps the stale folder for a
    /// symlink to the state directory and back, as fast as it can.
    @Test func aFolderSwappedForASymlinkMidRemovalLeavesTheVaultWhole() async throws {
        let (state, key, base) = try stateWithKey()
        let stale = base + "/" + Self.deadPID
        let stop = Atomic(false)
        let rounds = Atomic(0)
        let swapper = Thread {
            var round = 0
            while !stop.load() {
                round += 1
                rounds.store(round)
                let aside = base + "/aside-\(round)"
                mkdir(aside, 0o700)
                // Named as the file beside the folder: a removal by path that lists it here and
                // unlinks it after the swap deletes the real one.
                _ = FileManager.default.createFile(atPath: aside + "/vault.key", contents: Data([1]))
                rename(aside, stale)        // a real folder holding "vault.key"…
                let link = base + "/link-\(round)"
                symlink(state, link)
                rename(link, stale)         // …swapped for a symlink to the state directory
            }
        }
        swapper.start()
        var removals = 0
        let deadline = ContinuousClock.now + .seconds(20)
        while (removals < 300 || rounds.load() < 1000) && ContinuousClock.now < deadline {
            PrivateScratch.removeStale(in: base) { $0 == Self.deadPID || $0.hasPrefix("aside-") || $0.hasPrefix("link-") }
            removals += 1
        }
        stop.store(true)
        while !swapper.isFinished { try await Task.sleep(for: .milliseconds(5)) }
        #expect(rounds.load() >= 1000, "the swapper ran \(rounds.load()) rounds during \(removals) removals")
        #expect(try String(contentsOfFile: key, encoding: .utf8) == "secret", "the vault key survived the race")
        #expect(FileManager.default.fileExists(atPath: state + "/scratch"))
    }

    @Test(.enabled(if: geteuid() == 0, "needs root to make a folder another user owns"))
    func aBaseAnotherUserMadeIsRefusedWithAdvice() throws {
        let (_, _, base) = try stateWithKey()
        #expect(chown(base, 4242, 4242) == 0)
        #expect(throws: FieldHALError.self) { try PrivateScratch.prepare(base) }
        do { try PrivateScratch.prepare(base) } catch let error as FieldHALError {
            #expect(error.detail.contains("not a private directory of this user") && error.advice?.contains("remove it") == true)
        }
        #expect(PrivateScratch.removeStale(in: base) { _ in true } == 0, "nothing is removed from a folder that is not ours")
        chmod(base, 0o777)
        chown(base, 0, 0)
        #expect(throws: FieldHALError.self) { try PrivateScratch.prepare(base) }
    }
}

/// A flag two threads share.
final class Atomic<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func load() -> Value { lock.withLock { value } }
    func store(_ new: Value) { lock.withLock { value = new } }
}
