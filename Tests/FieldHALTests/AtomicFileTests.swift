@testable import FieldHAL
import FieldHALSystem
import Foundation
import Testing

struct SimulatedCrash: Error {}

func temporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "fieldhal-test-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

@Suite("Atomic files and the state directory")
struct AtomicFileTests {
    @Test func writesAndReadsWithTheModeAskedFor() throws {
        let directory = try temporaryDirectory()
        let path = directory + "/secret"
        try AtomicFile.write(Array("one".utf8), to: path)
        #expect(try AtomicFile.read(path) == Array("one".utf8))
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        try AtomicFile.write(Array("two".utf8), to: path, mode: 0o644)
        #expect(try AtomicFile.read(path) == Array("two".utf8))
        #expect(try AtomicFile.read(directory + "/absent") == nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["secret"], "no temporary file left")
    }

    @Test(arguments: AtomicFileWriter.Step.allCases)
    func aWriteInterruptedAtAnyStepLeavesTheOldOrTheNewFile(step: AtomicFileWriter.Step) throws {
        let directory = try temporaryDirectory()
        let path = directory + "/state.json"
        let old = [UInt8](repeating: 0x41, count: 100_000)
        let new = [UInt8](repeating: 0x42, count: 150_000)
        try AtomicFile.write(old, to: path)
        #expect(throws: SimulatedCrash.self) {
            try AtomicFile.write(new, to: path) { reached in if reached == step { throw SimulatedCrash() } }
        }
        let content = try AtomicFile.read(path)
        #expect(content == old || content == new)
        // Before the rename the old content must stand; after it, the new.
        #expect(content == (step == .renamed ? new : old))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["state.json"])
    }

    @Test func readersRacingAWriterSeeOnlyWholeFiles() throws {
        // (A writer killed with SIGKILL is tested in CLITests, against the real binary.)
        let directory = try temporaryDirectory()
        let path = directory + "/big"
        let old = [UInt8](repeating: 1, count: 4 << 20)
        try AtomicFile.write(old, to: path)
        let writer = Thread {
            let new = [UInt8](repeating: 2, count: 4 << 20)
            for _ in 0..<20 { try? AtomicFile.write(new, to: path) }
        }
        writer.start()
        // Readers racing the writer only ever see a whole file.
        for _ in 0..<200 {
            if let content = try AtomicFile.read(path) {
                #expect(content.count == 4 << 20)
                #expect(content.first == content.last)
            }
        }
    }

    @Test func stateDirectoryPrecedence() {
        #expect(StateDirectory.resolve(flag: "/a", environment: ["FIELDHAL_STATE_DIR": "/b"], configured: "/c").path == "/a")
        #expect(StateDirectory.resolve(flag: nil, environment: ["FIELDHAL_STATE_DIR": "/b"], configured: "/c").path == "/b")
        #expect(StateDirectory.resolve(flag: nil, environment: [:], configured: "/c/").path == "/c")
        #expect(StateDirectory.resolve(flag: nil, environment: [:], configured: nil).path == "/var/lib/fieldhal")
    }

    @Test func stateDirectoryIsCreatedPrivate() throws {
        let directory = try temporaryDirectory() + "/a/b"
        try StateDirectory(path: directory).prepare()
        let attributes = try FileManager.default.attributesOfItem(atPath: directory)
        #expect((attributes[.posixPermissions] as? Int) == 0o700)
    }

    @Test func unwritableDirectoryGivesAnActionableError() throws {
        do {
            try AtomicFile.write([1], to: "/proc/fieldhal-cannot-write-here")
            Issue.record("wrote into /proc")
        } catch let error as FieldHALError {
            #expect(error.kind == .io)
            #expect(error.description.hasPrefix("/proc/fieldhal-cannot-write-here: create"))
        }
    }
}
