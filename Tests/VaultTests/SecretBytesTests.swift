import FieldHAL
import FieldHALVault
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Issue 18: keys and PINs live in locked, guarded memory that is wiped when released, and
/// a PIN read from standard input never passes through a stdio buffer or a `String`.
@Suite("Secret bytes")
struct SecretBytesTests {
    /// The kernel's account of the mapping that holds `address` (/proc/self/smaps): its
    /// "Locked:" kB, or nil when no mapping holds it (freed).
    static func lockedKiB(at address: UInt) -> Int? {
        // /proc files report size 0: read to the end rather than by the file's size.
        let smaps = String(decoding: (try? FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/smaps")).readToEnd()) ?? Data(), as: UTF8.self)
        var inside = false
        for line in smaps.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if let range = fields.first, range.contains("-"), !range.hasSuffix(":") {
                let bounds = range.split(separator: "-").compactMap { UInt($0, radix: 16) }
                inside = bounds.count == 2 && bounds[0] <= address && address < bounds[1]
            } else if inside, fields.first == "Locked:" {
                return Int(fields.dropFirst().first ?? "")
            }
        }
        return nil
    }

    @Test func theBytesAreLockedIntoMemoryWhileTheyLive() throws {
        let secret = SecretBytes(copying: "4821")
        let address = secret.withUnsafeBytes { UInt(bitPattern: $0.baseAddress) }
        let locked = try #require(Self.lockedKiB(at: address), "no mapping holds the secret")
        #expect(locked >= 4, "the secret's page is locked (never swapped out): Locked \(locked) kB")
    }

    @Test func copyingWipesTheSourceAndComparesInConstantTime() throws {
        var source: [UInt8] = Array("2580".utf8)
        let secret = try SecretBytes(wiping: &source)
        #expect(source == [0, 0, 0, 0])
        #expect(secret.isEqual(to: "2580"))
        #expect(!secret.isEqual(to: "2581"))
        #expect(!secret.isEqual(to: "25800"))
        #expect(secret.unsafeString() == "2580")
    }

    @Test func linesAreReadFromADescriptorOneAtATime() throws {
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        let text = "4821\n1357\r\n\(String(repeating: "9", count: 70))\nafter\nlast"
        _ = text.withCString { write(ends[1], $0, strlen($0)) }
        close(ends[1])
        defer { close(ends[0]) }
        #expect(try SecretBytes.readLine(from: ends[0], maximum: 64)?.unsafeString() == "4821")
        #expect(try SecretBytes.readLine(from: ends[0], maximum: 64)?.unsafeString() == "1357", "a carriage return before the newline is dropped")
        #expect(throws: FieldHALError.self, "a line over the maximum is refused") { try SecretBytes.readLine(from: ends[0], maximum: 64) }
        #expect(try SecretBytes.readLine(from: ends[0], maximum: 64)?.unsafeString() == "after", "…and read to its end, so the next line is next")
        #expect(try SecretBytes.readLine(from: ends[0], maximum: 64)?.unsafeString() == "last", "a last line without a newline")
        #expect(try SecretBytes.readLine(from: ends[0], maximum: 64) == nil, "end of input")
    }
}
