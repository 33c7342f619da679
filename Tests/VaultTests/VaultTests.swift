@testable import FieldHAL
import FieldHALSystem
@testable import FieldHALVault
import Foundation
import Testing

func freshStateDirectory() throws -> StateDirectory {
    StateDirectory(path: NSTemporaryDirectory() + "fieldhal-vault-\(UUID().uuidString)")
}

func mode(_ path: String) throws -> Int {
    try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as! Int
}

@Suite("Vault")
struct VaultTests {
    @Test func roundTripSurvivesReopening() throws {
        let state = try freshStateDirectory()
        try Vault(stateDirectory: state).store(Array("token-123".utf8), as: "session.token")
        let reopened = try Vault(stateDirectory: state)
        #expect(try reopened.load("session.token") == Array("token-123".utf8))
        #expect(try reopened.load("absent") == nil)
        try reopened.store([], as: "empty")
        #expect(try reopened.load("empty") == [])
        try reopened.remove("session.token")
        #expect(try reopened.load("session.token") == nil)
    }

    @Test func keyAndEntriesArePrivateAndHoldNoPlaintext() throws {
        let state = try freshStateDirectory()
        let vault = try Vault(stateDirectory: state)
        try vault.store(Array("hunter2-hunter2".utf8), as: "pin")
        #expect(try mode(vault.keyPath) == 0o600)
        #expect(try mode(vault.entriesDirectory + "/pin.sealed") == 0o600)
        #expect(try mode(state.path) == 0o700)
        let sealed = try #require(try AtomicFile.read(vault.entriesDirectory + "/pin.sealed"))
        #expect(!String(decoding: sealed, as: UTF8.self).contains("hunter2"))
    }

    @Test func tamperedEntryIsReportedAndLeftInPlace() throws {
        let vault = try Vault(stateDirectory: try freshStateDirectory())
        try vault.store(Array("secret".utf8), as: "device.key")
        let path = vault.entriesDirectory + "/device.key.sealed"
        var bytes = try #require(try AtomicFile.read(path))
        for index in [0, 10, bytes.count - 1] {
            var damaged = bytes
            damaged[index] ^= 0x01
            try AtomicFile.write(damaged, to: path)
            #expect { try vault.load("device.key") } throws: { ($0 as? VaultError)?.kind == .tampered }
            #expect(try AtomicFile.read(path) == damaged, "the damaged entry is not replaced")
        }
        bytes.removeLast(5)
        try AtomicFile.write(bytes, to: path)
        #expect { try vault.load("device.key") } throws: { ($0 as? VaultError)?.kind == .tampered }
    }

    @Test func swappedEntryFailsAuthentication() throws {
        let vault = try Vault(stateDirectory: try freshStateDirectory())
        try vault.store(Array("normal".utf8), as: "pin.normal")
        try vault.store(Array("duress".utf8), as: "pin.duress")
        let duress = try #require(try AtomicFile.read(vault.entriesDirectory + "/pin.duress.sealed"))
        try AtomicFile.write(duress, to: vault.entriesDirectory + "/pin.normal.sealed")
        #expect { try vault.load("pin.normal") } throws: { ($0 as? VaultError)?.kind == .tampered }
    }

    @Test func wrongKeyCannotOpenEntries() throws {
        let first = try freshStateDirectory(), second = try freshStateDirectory()
        let vault = try Vault(stateDirectory: first)
        try vault.store([1, 2, 3], as: "counter")
        _ = try Vault(stateDirectory: second)
        let otherKey = try #require(try AtomicFile.read(second.file("vault.key")))
        try AtomicFile.write(otherKey, to: first.file("vault.key"))
        #expect { try Vault(stateDirectory: first).load("counter") } throws: { ($0 as? VaultError)?.kind == .tampered }
    }

    @Test func insecureCorruptOrMissingKeysAreRefused() throws {
        let state = try freshStateDirectory()
        try Vault(stateDirectory: state).store([1], as: "x")
        chmod(state.file("vault.key"), 0o644)
        #expect { try Vault(stateDirectory: state) } throws: { ($0 as? VaultError)?.kind == .keyInsecure }
        try AtomicFile.write([1, 2, 3], to: state.file("vault.key"))
        #expect { try Vault(stateDirectory: state) } throws: { ($0 as? VaultError)?.kind == .keyCorrupt }
        unlink(state.file("vault.key"))
        #expect { try Vault(stateDirectory: state) } throws: { ($0 as? VaultError)?.kind == .keyMissing }
        #expect(!FileManager.default.fileExists(atPath: state.file("vault.key")), "no new key over orphaned entries")
    }

    @Test func entryNamesCannotEscapeTheVault() throws {
        let vault = try Vault(stateDirectory: try freshStateDirectory())
        for name in ["", "../x", "a/b", ".hidden", String(repeating: "a", count: 101), "naïve"] {
            #expect(throws: VaultError.self, "\(name)") { try vault.store([1], as: name) }
        }
    }
}

/// The evidence's SHA-256 through libcrypto (docs/decisions.md): FIPS 180-2's known answers,
/// whole and fed in pieces of every size, so that the digest the server checks is SHA-256's.
@Suite("Evidence hash")
struct ContentHashTests {
    @Test func knownAnswersWholeAndInPieces() throws {
        let answers = [
            ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
            ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ]
        for (text, digest) in answers {
            var whole = try ContentHash()
            whole.update(Array(text.utf8))
            #expect(whole.hex() == digest, "\(text)")
            for piece in 1...5 {
                var pieces = try ContentHash()
                for start in stride(from: 0, to: text.utf8.count, by: piece) {
                    pieces.update(Array(Array(text.utf8)[start..<min(start + piece, text.utf8.count)]))
                }
                #expect(pieces.hex() == digest, "\(text) in pieces of \(piece)")
            }
        }
        // A million 'a's (FIPS 180-2's third answer), in 64 KiB chunks as evidence is sealed.
        var million = try ContentHash()
        let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 65_536)
        for _ in 0..<15 { million.update(chunk) }
        million.update(Array(chunk[0..<(1_000_000 - 15 * 65_536)]))
        #expect(million.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }
}
