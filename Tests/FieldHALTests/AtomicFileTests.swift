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

    /// A destination in a directory held open (what a plugin process is handed) takes the
    /// same steps relative to the descriptor: the directory moved after it was opened, the
    /// file still lands in it, whole or not at all, whatever step a crash comes at.
    @Test(arguments: AtomicFileWriter.Step.allCases)
    func aFileInADirectoryHeldOpenAppearsWholeUnderItsName(step: AtomicFileWriter.Step) throws {
        let base = try temporaryDirectory()
        try FileManager.default.createDirectory(atPath: base + "/before", withIntermediateDirectories: false)
        let directory = open(base + "/before", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(directory >= 0)
        defer { close(directory) }
        try FileManager.default.moveItem(atPath: base + "/before", toPath: base + "/after")
        let new = [UInt8](repeating: 0x42, count: 150_000)
        #expect(throws: SimulatedCrash.self) {
            let writer = try AtomicFileWriter(.entry("clip.wav", inDirectory: directory), mode: 0o640) { reached in
                if reached == step { throw SimulatedCrash() }
            }
            try writer.write(new)
            try writer.commit()
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: base + "/after") == (step == .renamed ? ["clip.wav"] : []))
        let writer = try AtomicFileWriter(.entry("clip.wav", inDirectory: directory), mode: 0o640)
        try writer.write(new)
        #expect(try FileManager.default.contentsOfDirectory(atPath: base + "/after").allSatisfy { $0.hasPrefix(".clip.wav.tmp-") || $0 == "clip.wav" })
        try writer.commit()
        #expect(try AtomicFile.read(base + "/after/clip.wav") == new)
        #expect(try FileManager.default.contentsOfDirectory(atPath: base + "/after") == ["clip.wav"])
        #expect((try FileManager.default.attributesOfItem(atPath: base + "/after/clip.wav")[.posixPermissions] as? Int) == 0o640)
        #expect(try FileManager.default.contentsOfDirectory(atPath: base) == ["after"], "nothing written by the old path")
    }

    @Test func aNameInADirectoryMustBePlain() throws {
        let directory = open(try temporaryDirectory(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(directory) }
        for name in ["", ".", "..", "../escape", "a/b"] {
            #expect(throws: FieldHALError.self, "\(name)") { try AtomicFileWriter(.entry(name, inDirectory: directory)) }
        }
    }

    /// A memory file is written in place through its own descriptor: emptied first, so a
    /// second recording replaces the first, and read back by position.
    @Test func aMemoryFileIsWrittenInPlaceThroughItsDescriptor() throws {
        let file = try MemoryFile(name: "test")
        for content in [[UInt8](repeating: 7, count: 10_000), Array("RIFF-short".utf8)] {
            let writer = try AtomicFileWriter(.memory(file))
            #expect(writer.path == "memory")
            try writer.write(content)
            try writer.write(Array("XX".utf8), at: 0)
            try writer.commit()
            #expect(file.size == content.count)
            #expect(try file.read(at: 0, count: content.count) == Array("XX".utf8) + content.dropFirst(2))
        }
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
