import CSodium
import FieldHAL
@testable import FieldHALFlows
import FieldHALSystem
import FieldHALVault
import Foundation
import Synchronization
import TestSupport
import Testing
import Transrify
import TransrifyLabServer

final class RecordingClock: RetryClock {
    let waits = Mutex<[Duration]>([])
    func sleep(for duration: Duration) async throws { waits.withLock { $0.append(duration) } }
}

func scratchDirectory(_ name: String) -> String { NSTemporaryDirectory() + "fieldhal-flows-\(UUID().uuidString)-\(name)" }

func sha256Hex(_ bytes: [UInt8]) -> String {
    var digest = [UInt8](repeating: 0, count: Int(crypto_hash_sha256_BYTES))
    crypto_hash_sha256(&digest, bytes, UInt64(bytes.count))
    return digest.map { String(format: "%02x", $0) }.joined()
}

func randomBytes(_ count: Int) -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    randombytes_buf(&bytes, count)
    return bytes
}

func openQueue(_ state: String) throws -> EvidenceQueue {
    let directory = StateDirectory(path: state)
    return try EvidenceQueue(stateDirectory: directory, vault: try Vault(stateDirectory: directory))
}

@Suite(.serialized, .timeLimit(.minutes(2)))
struct EvidenceQueueTests {
    static let tenantKey = "tenant-flows"

    func startLab(port: Int = 0, directory: String = scratchDirectory("lab")) async throws -> RunningLabServer {
        var configuration = LabServer.Configuration(directory: directory)
        configuration.port = port
        let server = try LabServer(configuration)
        try server.addTenant(key: Self.tenantKey, name: "Flows")
        return try await server.start()
    }

    func uploader(_ queue: EvidenceQueue, _ lab: RunningLabServer, port: Int? = nil) -> EvidenceUploader {
        var client = TransrifyClient(baseURL: port.map { URL(string: "http://127.0.0.1:\($0)")! } ?? lab.baseURL, tenantKey: Self.tenantKey)
        client.clock = RecordingClock()
        var uploader = EvidenceUploader(client: client, queue: queue)
        uploader.clock = RecordingClock()
        return uploader
    }

    @Test(arguments: [0, 1, 65_535, 65_536, 65_537, 300_000])
    func sealedEvidenceOpensToTheSameBytesAndDigest(_ size: Int) throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let content = randomBytes(size)
        let source = state + "/source.bin"
        try Data(content).write(to: URL(fileURLWithPath: source))
        let item = try queue.add(kind: .video, contentType: "video/x-matroska", incidentId: "i-1", file: source)
        #expect(item.size == Int64(size))
        #expect(item.sha256 == sha256Hex(content))
        let sealed = try [UInt8](Data(contentsOf: URL(fileURLWithPath: queue.dataPath(item.id))))
        if size >= 16 {  // 16 random bytes cannot appear in the ciphertext by chance; 1 byte can
            #expect(sealed.firstRange(of: content.prefix(16)) == nil, "nothing in clear at rest")
        }
        let out = state + "/out.bin"
        try queue.decrypt(item, to: out)
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: out))) == content)
        #expect(try openQueue(state + "-other").items().isEmpty)
    }

    @Test func alteredOrTruncatedEvidenceIsRefusedAndKept() throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let item = try queue.add(kind: .text, contentType: "text/plain", incidentId: "i", bytes: randomBytes(100_000))
        var sealed = try [UInt8](Data(contentsOf: URL(fileURLWithPath: queue.dataPath(item.id))))
        sealed[sealed.count / 2] ^= 1
        try Data(sealed).write(to: URL(fileURLWithPath: queue.dataPath(item.id)))
        #expect(throws: FieldHALError.self) { try queue.decrypt(item, to: state + "/out") }
        try Data(sealed.prefix(sealed.count - 40)).write(to: URL(fileURLWithPath: queue.dataPath(item.id)))
        #expect(throws: FieldHALError.self) { try queue.decrypt(item, to: state + "/out") }
        #expect(try queue.items().map(\.id) == [item.id], "a damaged item stays in the queue")
    }

    /// Any number of openers at once (the daemon's uploads, a duress capture, `evidence
    /// capture`): nobody is refused as busy, the key is one, and an item being uploaded is
    /// claimed by one uploader only, until it lets go.
    @Test func manyOpenersShareTheQueueAndAnUploadClaimsItsItem() throws {
        let state = scratchDirectory("state")
        let first = try openQueue(state)
        let second = try openQueue(state)
        let item = try first.add(kind: .text, contentType: "text/plain", incidentId: "i", bytes: Array("one".utf8))
        #expect(try second.items().map(\.id) == [item.id], "the same key: the second opener reads the first's item")
        let reader = try EvidenceQueue(stateDirectory: StateDirectory(path: state), vault: try Vault(stateDirectory: StateDirectory(path: state)), exclusive: false)
        #expect(try reader.items().map(\.id) == [item.id])
        var claim = first.claim(item.id)
        #expect(claim != nil)
        #expect(second.claim(item.id) == nil, "claimed by the first: the second uploader leaves it alone")
        claim = nil
        #expect(second.claim(item.id) != nil, "released: free again")
        #expect(first.claim("no-such-item") == nil)
    }

    /// Two processes opening a new queue at the same moment end with one key between them.
    @Test func concurrentFirstOpensMakeOneKey() async throws {
        let state = scratchDirectory("state")
        let queues = try await withThrowingTaskGroup(of: EvidenceQueue.self) { group in
            for _ in 0..<8 { group.addTask { try openQueue(state) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let item = try queues[0].add(kind: .text, contentType: "text/plain", incidentId: "i", bytes: Array("k".utf8))
        for queue in queues { #expect(try queue.items().map(\.id) == [item.id]) }
    }

    @Test func leftoversOfAKilledAddOrRemovalAreRemovedOnOpen() throws {
        let state = scratchDirectory("state")
        var queue: EvidenceQueue? = try openQueue(state)
        let kept = try queue!.add(kind: .text, contentType: "text/plain", incidentId: "i", bytes: Array("kept".utf8))
        let directory = queue!.directory
        queue = nil
        // A temporary file and a decrypted upload, stale; the same kind fresh, which a live
        // process may still be writing.
        let stale = [".0000000000000-x.data.tmp-1-2", "\(kept.id).upload"]
        let fresh = [".capture-recording.wav"]
        for name in stale + fresh {
            _ = FileManager.default.createFile(atPath: directory + "/" + name, contents: Data("x".utf8))
        }
        let old = Date().addingTimeInterval(-EvidenceQueue.leftoverAge - 10)
        for name in stale { try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: directory + "/" + name) }
        // Payloads without an item: one a live add still holds (claimed), one nobody holds
        // however young (a kill between an add's payload and its item, or between a
        // removal's item and its payload), which goes at once.
        let orphan = "0000000000000-orphan.data", adding = "0000000000001-adding.data"
        for name in [orphan, adding] { _ = FileManager.default.createFile(atPath: directory + "/" + name, contents: Data("x".utf8)) }
        let writer = open(directory + "/" + adding, O_RDONLY | O_CLOEXEC)
        defer { close(writer) }
        #expect(flock(writer, LOCK_EX | LOCK_NB) == 0)
        queue = try openQueue(state)
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: directory))
        #expect(names == Set(["\(kept.id).data", "\(kept.id).item", "queue.lock", adding] + fresh))
        #expect(try queue!.items().map(\.id) == [kept.id])
    }

    /// Silent items (the capture after a duress sign-in) are uploaded by the background
    /// uploader but never listed, and `evidence flush`'s uploader leaves them alone.
    @Test func silentItemsAreNotListedAndOnlyTheBackgroundUploadsThem() throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let shown = try queue.add(kind: .text, contentType: "text/plain", incidentId: "i", bytes: Array("shown".utf8))
        let silent = try queue.add(kind: .text, contentType: "text/plain", incidentId: "i", bytes: Array("silent".utf8), silent: true)
        let failed = try queue.recordCaptureError(kind: .photo, incidentId: "i", message: "no camera", silent: true)
        #expect(try queue.visibleItems().map(\.id) == [shown.id])
        #expect(Set(try queue.items().map(\.id)) == [shown.id, silent.id, failed.id])
        #expect(try queue.item(silent.id)?.isSilent == true && (try queue.item(shown.id)?.isSilent) == false)
    }

    @Test func serverDownThenUpEveryItemArrivesOnce() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        var expected: Set<String> = []
        for size in [10, 70_000, 250_000] {
            expected.insert(try queue.add(kind: .photo, contentType: "image/jpeg", incidentId: "inc-1", bytes: randomBytes(size)).sha256)
        }
        // Down: the lab server's port, nobody listening.
        let labDirectory = scratchDirectory("lab")
        let probe = try await startLab(directory: labDirectory)
        let port = probe.port
        await probe.stop()
        let offline = try await uploader(queue, probe, port: port).flush()
        #expect(offline.uploaded.isEmpty)
        #expect(offline.deferred.count == 1, "the flush stops at the first network failure")
        #expect(try queue.items().count == 3)
        #expect(try queue.items().first?.attempts == 1)
        #expect(try queue.items().first?.nextAttemptAt != nil)
        // Up again, same port, same database.
        let lab = try await startLab(port: port, directory: labDirectory)
        defer { Task { await lab.stop() } }
        let online = try await uploader(queue, lab).flush(ignoringBackoff: true)
        #expect(online.uploaded.count == 3)
        #expect(try queue.items().isEmpty)
        let evidence = try lab.server.evidence()
        #expect(Set(evidence.map(\.sha256)) == expected)
        #expect(evidence.allSatisfy { $0.finalizeCalls == 1 && $0.incidentId == "inc-1" && $0.kind == "PHOTO" })
    }

    /// The link back after a cut: an item that failed for the network does not wait out its
    /// backoff once another upload gets through (here the next segment, which wakes the
    /// uploader). Before, it waited up to its backoff: 4–10 s in `bench seizure`'s cuts.
    @Test func anItemThatFailedForTheNetworkGoesUpAsSoonAsTheLinkIsBack() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let early = try queue.add(kind: .audio, contentType: "audio/wav", incidentId: "inc-9", bytes: randomBytes(100))
        let labDirectory = scratchDirectory("lab")
        let probe = try await startLab(directory: labDirectory)
        let port = probe.port
        await probe.stop()
        _ = try await uploader(queue, probe, port: port).flush()
        let waiting = try queue.item(early.id)
        #expect(waiting?.waitingForNetwork == true && (waiting?.nextAttemptAt ?? .distantPast) > Date(), "\(String(describing: waiting))")
        let lab = try await startLab(port: port, directory: labDirectory)
        defer { Task { await lab.stop() } }
        try queue.add(kind: .audio, contentType: "audio/wav", incidentId: "inc-9", bytes: randomBytes(200))
        let back = try await uploader(queue, lab).flush()
        #expect(back.uploaded.count == 2 && back.waiting == 0, "\(back)")
        #expect(try queue.items().isEmpty)
    }

    /// After a cut that outlasts the recording nothing new comes to find the link back: a
    /// flush with nothing due probes it with one item (one attempt, however many wait), and
    /// once the probe gets through the whole backlog goes up in the same flush.
    @Test func aProbeFindsTheLinkBackWhenNothingNewIsQueued() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        for size in [100, 200, 300] {
            try queue.add(kind: .video, contentType: "video/x-msvideo", incidentId: "inc-10", bytes: randomBytes(size))
        }
        let labDirectory = scratchDirectory("lab")
        let down = try await startLab(directory: labDirectory)
        let port = down.port
        await down.stop()
        var tries = 0
        while try queue.items().contains(where: { $0.waitingForNetwork != true }), tries < 5 {
            _ = try await uploader(queue, down, port: port).flush()
            tries += 1
        }
        let before = try queue.items()
        #expect(before.count == 3 && before.allSatisfy { $0.waitingForNetwork == true && ($0.nextAttemptAt ?? .distantPast) > Date() })
        // Still down: one probe, and only the first item's count moves.
        let probed = try await uploader(queue, down, port: port).flush()
        #expect(probed.deferred.count == 1 && probed.uploaded.isEmpty && probed.waiting == 2, "\(probed)")
        let after = try queue.items()
        #expect(after.map(\.attempts) == [before[0].attempts + 1, before[1].attempts, before[2].attempts])
        // Back: nothing is due, and everything goes up.
        let lab = try await startLab(port: port, directory: labDirectory)
        defer { Task { await lab.stop() } }
        let back = try await uploader(queue, lab).flush()
        #expect(back.uploaded.count == 3 && back.waiting == 0, "\(back)")
        #expect(try queue.items().isEmpty)
        #expect(try lab.server.evidence().count == 3)
    }

    @Test func finalizeIsRetriedTwiceWithBackoffThenResumesWithoutReupload() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let lab = try await startLab()
        defer { Task { await lab.stop() } }
        try queue.add(kind: .audio, contentType: "audio/wav", incidentId: "inc-2", bytes: randomBytes(1000))
        // Two failures: the retries (after 1 s and 2 s, on the fake clock) get it through.
        lab.server.injectFailures(TransrifyAPI.finalizePath, statuses: [503, 503])
        var first = uploader(queue, lab)
        let clock = RecordingClock()
        first.clock = clock
        #expect(try await first.flush().uploaded.count == 1)
        #expect(clock.waits.withLock { $0 } == [.seconds(1), .seconds(2)])
        // Three failures: the item stays, uploaded but not finalized; the next flush only finalizes.
        try queue.add(kind: .audio, contentType: "audio/wav", incidentId: "inc-2", bytes: randomBytes(1000))
        lab.server.injectFailures(TransrifyAPI.finalizePath, statuses: [503, 503, 503])
        #expect(try await uploader(queue, lab).flush().uploaded.isEmpty)
        let waiting = try #require(try queue.items().first)
        #expect(waiting.phase == .uploaded && waiting.objectKey != nil)
        lab.server.injectFailures(TransrifyAPI.presignPath, statuses: [500])  // would break a re-upload
        #expect(try await uploader(queue, lab).flush(ignoringBackoff: true).uploaded.count == 1)
        #expect(try lab.server.evidence().count == 2)
    }

    /// A presign answer that names a host the kit does not send evidence to is refused before
    /// anything is decrypted: the item stays queued and says what to change (issue 18).
    @Test func evidenceIsNotSentToAHostPresignNamesButTheKitDoesNotKnow() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        try queue.add(kind: .text, contentType: "text/plain", incidentId: "inc-4", bytes: Array("note".utf8))
        let api = try ScriptedHTTPServer { _, _, write in
            let presigned = #"{"url":"http://evidence.attacker.example/put?sig=x","key":"k-1"}"#
            _ = write(ScriptedHTTPServer.answer("200 OK", headers: ["Content-Type": "application/json"], body: Data(presigned.utf8)))
        }
        defer { api.stop() }
        var client = TransrifyClient(baseURL: api.baseURL, tenantKey: Self.tenantKey)
        client.clock = RecordingClock()
        let report = try await EvidenceUploader(client: client, queue: queue).flush()
        #expect(report.uploaded.isEmpty)
        let item = try #require(try queue.items().first)
        #expect(item.phase == .queued && item.attempts == 1)
        #expect(item.lastError?.contains("evidence.attacker.example, which is neither the API's host nor in [transrify] upload_hosts") == true,
                "\(item.lastError ?? "")")
        #expect(api.requests.count == 1 && api.requests[0].hasPrefix("POST /v1/evidence/presign"), "\(api.requests)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: queue.directory).allSatisfy { !$0.hasSuffix(".upload") },
                "decrypted for an upload that was refused")
    }

    /// The PUT's body is decrypted as the connection takes it: while the storage host is
    /// receiving it, nothing but sealed files is in the queue's directory (issue 19), and what
    /// arrives is the evidence, byte for byte.
    @Test func anUploadIsDecryptedAsItIsSentNeverOntoDisk() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let content = randomBytes(3 << 20)
        let item = try queue.add(kind: .video, contentType: "video/x-msvideo", incidentId: "inc-5", bytes: content)
        let seenDuringPut = Mutex<[String]?>(nil)
        let directory = queue.directory
        let server = try ScriptedHTTPServer { head, _, write in
            if head.hasPrefix("POST /v1/evidence/presign") {
                let port = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("host:") }.map { $0.split(separator: ":").last! } ?? ""
                let body = #"{"url":"http://127.0.0.1:\#(port.trimmingCharacters(in: .whitespaces))/storage/k-5?sig=x","key":"k-5"}"#
                _ = write(ScriptedHTTPServer.answer("200 OK", body: Data(body.utf8)))
            } else if head.hasPrefix("PUT /storage/k-5") {
                seenDuringPut.withLock { $0 = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? ["(unreadable)"] }
                _ = write(ScriptedHTTPServer.answer("200 OK"))
            } else {
                _ = write(ScriptedHTTPServer.answer("200 OK", body: Data(#"{"evidenceId":"e-5"}"#.utf8)))
            }
        }
        defer { server.stop() }
        var client = TransrifyClient(baseURL: server.baseURL, tenantKey: Self.tenantKey)
        client.clock = RecordingClock()
        let report = try await EvidenceUploader(client: client, queue: queue).flush()
        #expect(report.uploaded == [item.id: "e-5"], "\(report)")
        let put = try #require(server.requests.firstIndex { $0.hasPrefix("PUT ") })
        #expect(server.bodies[put] == Data(content), "the storage host got \(server.bodies[put].count) bytes")
        #expect(server.requests[put].contains("Content-Length: \(content.count)") || server.requests[put].lowercased().contains("content-length: \(content.count)"))
        let files = try #require(seenDuringPut.withLock { $0 })
        #expect(Set(files).subtracting(["queue.lock", "\(item.id).data", "\(item.id).item"]).isEmpty, "during the PUT the queue held \(files)")
    }

    @Test func aMismatchedObjectIsUploadedAgain() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let lab = try await startLab()
        defer { Task { await lab.stop() } }
        try queue.add(kind: .text, contentType: "text/plain", incidentId: "inc-3", bytes: Array("note".utf8))
        lab.server.injectFailures("/lab/objects", statuses: [403])  // the signed URL refused
        let refused = try await uploader(queue, lab).flush()
        #expect(refused.uploaded.isEmpty)
        #expect(try queue.items().first?.phase == .queued)
        let again = try await uploader(queue, lab).flush(ignoringBackoff: true)
        #expect(again.uploaded.count == 1, "deferred: \(again.deferred), waiting: \(again.waiting), queue: \((try? queue.items()) ?? [])")
    }

    /// The uploader found an item "claimed" right after its own claim had ended, because a
    /// child being spawned elsewhere in the process still held a copy of the descriptor.
    @Test func aClaimEndsWhenItIsReleasedEvenWhileChildrenAreSpawned() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let item = try queue.add(kind: .text, contentType: "text/plain", incidentId: "inc-5", bytes: Array("note".utf8))
        let spawning = Atomic<Bool>(true)
        let spawned = Atomic<Int>(0)
        let spawner = Thread {
            while spawning.load(ordering: .relaxed) {
                let child = Process()
                child.executableURL = URL(fileURLWithPath: "/bin/true")
                try? child.run()
                child.waitUntilExit()
                spawned.add(1, ordering: .relaxed)
            }
        }
        spawner.start()
        defer { spawning.store(false, ordering: .relaxed) }
        var claims = 0
        var refused = 0
        // Long enough that dozens of spawns overlap the claims (before the fix: 19 to 1532 refused).
        while claims < 3000 || (spawned.load(ordering: .relaxed) < 30 && claims < 3_000_000) {
            if let claim = queue.claim(item.id) { withExtendedLifetime(claim) {} } else { refused += 1 }
            claims += 1
        }
        #expect(spawned.load(ordering: .relaxed) >= 30)
        #expect(refused == 0, "\(refused) of \(claims) claims found the item still claimed after its release")
    }

    @Test func missingDevicesAreReportedAndTheOtherKindsGoOn() async throws {
        let state = scratchDirectory("state")
        let queue = try openQueue(state)
        let capture = EvidenceCapture(queue: queue, camera: nil, microphone: nil, location: nil)
        let items = await capture.capture([.text, .photo, .audio, .nearby], incidentId: "inc-4", note: "note")
        #expect(items.map(\.kind) == [.text, .text, .text, .nearby])
        #expect(items.map(\.failedKind) == [nil, .photo, .audio, nil])
        #expect(items[1].lastError == nil)
        let out = state + "/photo-error.txt"
        try queue.decrypt(items[1], to: out)
        #expect(try String(contentsOfFile: out, encoding: .utf8) == "PHOTO evidence not captured: evidence: no camera in this kit")
    }
}
