import FieldHAL
import FieldHALVault
import Foundation
import Testing

/// The web door's tokens as the vault keeps them: hashed, checked in constant time, kept
/// across a restart, and a book that is not one refused rather than emptied.
struct WebTokenBookTests {
    static func scratch() throws -> String {
        let directory = NSTemporaryDirectory() + "fieldhal-web-tokens-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory + "/" + WebTokenBook.fileName
    }

    @Test func aTokenIsFoundByItsTextOnlyAndOutlivesARestartUntilRevoked() throws {
        let path = try Self.scratch()
        let book = try WebTokenBook(path: path)
        let (token, text) = try book.issue(origin: "https://kiosk.example", allow: ["status"], devices: ["camera.front"])
        let (other, otherText) = try book.issue(origin: "http://localhost:8000", allow: ["haptics"], devices: nil)
        #expect(book.token(presented: text) == token && book.token(presented: otherText) == other)
        #expect(book.knows(origin: "https://kiosk.example") && !book.knows(origin: "https://evil.example"))

        // Every near miss is nobody: another secret, another id, cut short, no prefix.
        let secret = text.split(separator: "_")[2]
        let misses = [String(text.dropLast()) + "0", String(text.dropLast()), "fhw_\(other.id)_\(secret)", String(text.dropFirst(4)),
                      text + "00", "", "fhw__", text.uppercased()]
        for miss in misses where miss != text { #expect(book.token(presented: miss) == nil, "\(miss)") }

        let reopened = try WebTokenBook(path: path)
        #expect(reopened.all == [token, other] && reopened.token(presented: text) == token)
        #expect(try reopened.revoke(id: token.id) == token)
        #expect(try reopened.revoke(id: token.id) == nil)
        #expect(reopened.token(presented: text) == nil)
        #expect(try WebTokenBook(path: path).all == [other], "the revocation is on disk")
    }

    @Test func aBookThatIsNotOneIsAnErrorNamingTheFile() throws {
        let path = try Self.scratch()
        try Data("{\"tokens\": [{\"id\": 3}]}".utf8).write(to: URL(fileURLWithPath: path))
        #expect {
            _ = try WebTokenBook(path: path)
        } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return error.kind == .malformedData && error.subject == path && error.advice?.contains("issue the kiosk's tokens again") == true
        }
    }
}
