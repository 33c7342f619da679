import CSodium
import Foundation
import Testing
@testable import FieldHAL
@testable import FieldHALVault

/// Seed 001's sealed locations: round trips, fuzzing, every way a payload can be refused,
/// and interoperability with PyNaCl (libsodium's sealed boxes as another stack sees them).
@Suite("Location seal")
struct LocationSealTests {
    let now = Date(timeIntervalSince1970: 1_795_000_000)

    func keys() throws -> DeviceKeyPair {
        try DeviceKeyPair.loadOrCreate(in: try Vault(stateDirectory: try freshStateDirectory()))
    }

    @Test func sealedLocationOpensWithTheRecipientsKeyOnly() throws {
        let recipient = try keys()
        let location = SharedLocation(lat: 34.052, lon: -118.243, ts: 1_795_000_000, acc: 5)
        let payload = try LocationSeal.seal(location, for: recipient.publicKey)
        #expect(try LocationSeal.open(payload, with: recipient, now: now) == location)
        // Sealed boxes are randomised: the same location never gives the same payload.
        #expect(try LocationSeal.seal(location, for: recipient.publicKey) != payload)
        #expect(throws: FieldHALError.self) { try LocationSeal.open(payload, with: try keys(), now: now) }
    }

    @Test func keyPairIsMadeOnceAndKeptInTheVault() throws {
        let state = try freshStateDirectory()
        let first = try DeviceKeyPair.loadOrCreate(in: try Vault(stateDirectory: state))
        let again = try DeviceKeyPair.loadOrCreate(in: try Vault(stateDirectory: state))
        #expect(first.publicKey == again.publicKey && first.publicKey.count == 32)
        let entry = state.file("vault/\(DeviceKeyPair.vaultEntry).sealed")
        #expect(try mode(entry) == 0o600)
        // The file holds the secret sealed, so the 32 secret bytes never appear in it.
        let stored = try #require(FileManager.default.contents(atPath: entry))
        let secret = first.secretKey.withBytes { Array(UnsafeBufferPointer(start: $0, count: 32)) }
        #expect(Array(stored).firstRange(of: secret) == nil)
        #expect(Base64.decode(first.publicKeyBase64) == first.publicKey)
    }

    @Test(arguments: [2, 3])
    func fuzzRoundsAndWidensAccuracy(decimals: Int) throws {
        let exact = SharedLocation(lat: 52.516275, lon: 13.377704, ts: 1, acc: 4.5)
        let fuzzed = exact.fuzzed(toDecimals: decimals)
        let scale = pow(10.0, Double(decimals))
        #expect(fuzzed.lat == (52.516275 * scale).rounded() / scale)
        #expect(fuzzed.lon == (13.377704 * scale).rounded() / scale)
        // The widened circle still contains the true position.
        let northError = abs(fuzzed.lat - exact.lat) * 111_320
        let eastError = abs(fuzzed.lon - exact.lon) * 111_320 * cos(exact.lat * .pi / 180)
        #expect(fuzzed.acc >= exact.acc + (northError * northError + eastError * eastError).squareRoot())
        #expect(fuzzed.acc < exact.acc + (decimals == 2 ? 800 : 80))
        #expect(fuzzed.ts == exact.ts)
    }

    @Test func staleAndFutureLocationsAreRefused() throws {
        let recipient = try keys()
        func payload(age seconds: Int64) throws -> String {
            try LocationSeal.seal(SharedLocation(lat: 1, lon: 2, ts: Int64(now.timeIntervalSince1970) - seconds, acc: 3), for: recipient.publicKey)
        }
        #expect(try LocationSeal.open(try payload(age: 599), with: recipient, now: now, maximumAge: .seconds(600)).lat == 1)
        #expect(throws: FieldHALError(.stale, subject: "location open", detail: "the location is 601 s old; the window is 600 s")) {
            try LocationSeal.open(try payload(age: 601), with: recipient, now: now, maximumAge: .seconds(600))
        }
        #expect(try LocationSeal.open(try payload(age: -30), with: recipient, now: now).lat == 1, "within the clock skew")
        #expect { try LocationSeal.open(try payload(age: -3600), with: recipient, now: now) } throws: {
            ($0 as? FieldHALError)?.kind == .stale && "\($0)".contains("future")
        }
    }

    @Test func everyAlteredByteIsRefused() throws {
        let recipient = try keys()
        let payload = try LocationSeal.seal(SharedLocation(lat: 1, lon: 2, ts: Int64(now.timeIntervalSince1970), acc: 3), for: recipient.publicKey)
        let box = try #require(Base64.decode(payload))
        for index in box.indices {
            var altered = box
            altered[index] ^= 0x01
            #expect(throws: FieldHALError.self) { try LocationSeal.open(Base64.encode(altered), with: recipient, now: now) }
        }
        for truncated in [0, 1, 47, 48, box.count - 1] {
            #expect(throws: FieldHALError.self) { try LocationSeal.open(Base64.encode(Array(box.prefix(truncated))), with: recipient, now: now) }
        }
    }

    @Test(arguments: ["", "not base64!", "====", "AAAA", String(repeating: "A", count: 10_000)])
    func garbagePayloadsAreRefusedAsMalformed(payload: String) throws {
        let recipient = try keys()
        #expect { try LocationSeal.open(payload, with: recipient, now: now) } throws: {
            ($0 as? FieldHALError)?.kind == .malformedData
        }
    }

    @Test(arguments: [#"{"lat":1,"lon":2}"#, #"{"lat":"1","lon":2,"ts":3,"acc":4}"#, #"{"lat":91,"lon":2,"ts":3,"acc":4}"#,
                      #"{"lat":1,"lon":2,"ts":3,"acc":-4}"#, "[]", "null", "\u{0}"])
    func authenticButMalformedContentIsRefused(json: String) throws {
        let recipient = try keys()
        let plaintext = Array(json.utf8)
        var box = [UInt8](repeating: 0, count: plaintext.count + crypto_box_sealbytes())
        #expect(crypto_box_seal(&box, plaintext, UInt64(plaintext.count), recipient.publicKey) == 0)
        #expect { try LocationSeal.open(Base64.encode(box), with: recipient, now: Date(timeIntervalSince1970: 3)) } throws: {
            ($0 as? FieldHALError)?.kind == .malformedData
        }
    }

    @Test func recipientKeyMustBeThirtyTwoBytes() throws {
        #expect(throws: FieldHALError.self) { try LocationSeal.publicKey(fromBase64: Base64.encode([1, 2, 3])) }
        #expect(throws: FieldHALError.self) { try LocationSeal.seal(SharedLocation(lat: 0, lon: 0, ts: 0, acc: 0), for: [UInt8](repeating: 1, count: 31)) }
    }

    // MARK: - Interoperability with PyNaCl

    static let peer = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("nacl-peer.py").path

    func pynacl(_ arguments: String...) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [Self.peer] + arguments
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let problem = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FieldHALError(.io, subject: "nacl-peer.py", detail: "exit \(process.terminationStatus): \(problem) (install python3-nacl)")
        }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func payloadSealedByFieldHALOpensInPyNaCl() throws {
        let pair = try pynacl("keypair").split(separator: " ").map(String.init)
        let recipientKey = try LocationSeal.publicKey(fromBase64: pair[1])
        let location = SharedLocation(lat: -33.8568, lon: 151.2153, ts: 1_795_000_000, acc: 12.5)
        let payload = try LocationSeal.seal(location, for: recipientKey)
        let json = try pynacl("open", pair[0], payload)
        #expect(try JSONDecoder().decode(SharedLocation.self, from: Data(json.utf8)) == location)
        // The field names are the seed's, whatever order the encoder chose.
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        #expect(Set(object.keys) == ["lat", "lon", "ts", "acc"])
    }

    @Test func payloadSealedByPyNaClOpensInFieldHAL() throws {
        let recipient = try keys()
        let json = #"{ "lat": 34.052, "lon": -118.243, "ts": 1795000000, "acc": 5.0 }"#  // seed 001's example, re-dated
        let payload = try pynacl("seal", recipient.publicKeyBase64, json)
        let location = try LocationSeal.open(payload, with: recipient, now: now)
        #expect(location == SharedLocation(lat: 34.052, lon: -118.243, ts: 1_795_000_000, acc: 5))
    }
}
