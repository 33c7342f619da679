import FieldHAL
import FieldHALSystem
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// What the core and the system module do for themselves since they stand on
/// FoundationEssentials (issue 42): each checked against what Foundation gave before.
@Suite("Without Foundation")
struct EssentialsTests {
    /// The directory a configuration's relative paths are taken from, as NSString's
    /// `deletingLastPathComponent` gave it (with "." for a bare name, as the loader made it).
    @Test func aConfigurationsDirectory() {
        let paths = ["/etc/fieldhal/kit.toml", "kit.toml", "conf/kit.toml", "/kit.toml", "/etc/fieldhal//kit.toml",
                     "/etc/fieldhal/", "a/b/c/d.toml", "./kit.toml", "../kits/kit.toml"]
        for path in paths {
            let foundation = (path as NSString).deletingLastPathComponent
            #expect(FilePaths.directory(of: path) == (foundation.isEmpty ? "." : foundation), "\(path)")
        }
    }

    @Test func trimmingAndHexadecimal() {
        for text in ["  Keyboard \n", "\t\n", "", "x", " a b ", "\r\nUSB GNSS\r\n"] {
            #expect(text.trimmingSpace() == text.trimmingCharacters(in: .whitespacesAndNewlines), "\(text.debugDescription)")
        }
        for value: UInt16 in [0, 0x1d6b, 0xffff, 0x0a] {
            #expect(value.hex(width: 4) == String(format: "%04x", value))
        }
        for value: UInt8 in [0, 7, 0xab, 0xff] {
            #expect(value.hex(width: 2, uppercase: true) == String(format: "%02X", value))
        }
    }

    /// A thread of the system module runs its body, under the name `ps -L` shows.
    @Test func aSystemThreadRunsNamed() async throws {
        let seen = Mutex<String?>(nil)
        let done = try WakeupEvent()
        try SystemThread.start(name: "fieldhal-probe-with-a-long-name") {
            let path = "/proc/thread-self/comm"
            let name = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingSpace()
            seen.withLock { $0 = name }
            done.signal()
        }
        let ran = try await DeviceThread.runOnce(name: "wait") { done.wait(upTo: .seconds(60)) }
        #expect(ran)
        // The kernel keeps 15 bytes of a thread's name.
        #expect(seen.withLock { $0 } == "fieldhal-probe-")
    }

    /// `$TMPDIR` as NSTemporaryDirectory reads it, with its slash.
    @Test func theTemporaryDirectory() {
        #expect(ScratchDirectory.temporaryDirectory == NSTemporaryDirectory())
    }
}
