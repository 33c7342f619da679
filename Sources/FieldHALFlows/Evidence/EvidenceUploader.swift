import FieldHAL
import Foundation
import Transrify

/// Moves queued evidence to the server (Req 19–20): presign → PUT the plaintext to the
/// signed URL → finalize with incident, kind, key, size and SHA-256, finalize retried up to
/// twice with exponential backoff. An item's progress is saved after each step, so a
/// restart goes on where it stopped; an item leaves the queue only with an evidence id.
public struct EvidenceUploader: Sendable {
    public struct Report: Sendable, Equatable {
        public var uploaded: [String: String] = [:]  // item id → evidence id
        public var deferred: [String: String] = [:]  // item id → why
        public var waiting = 0                       // not due yet (backoff)

        /// A later pass of the same flush: its outcomes join these (the first outcome of an
        /// item stands), and its count of waiting items replaces this one.
        mutating func absorb(_ later: Report) {
            uploaded.merge(later.uploaded) { first, _ in first }
            deferred.merge(later.deferred) { first, _ in first }
            waiting = later.waiting
        }
    }

    public var client: TransrifyClient
    public var queue: EvidenceQueue
    public var clock: any RetryClock = ContinuousRetryClock()
    public var now: @Sendable () -> Date = { Date() }
    /// Whether silent items (the work after a duress sign-in) go too. The background
    /// uploaders send everything; `evidence flush`, which a person at the device runs and
    /// watches, sends only what it lists, so that its output and its time do not depend on
    /// whether a duress capture is waiting.
    public var includeSilent = true
    /// Hears each item's plaintext bytes read for its PUT so far (a terminal's progress line).
    public var progress: (@Sendable (EvidenceItem, Int64) -> Void)?
    /// Uploads at once (each lane one incident's one kind, in order): a link with latency
    /// spends most of an item's time waiting on its three round trips, not sending.
    public var lanes = 3
    /// Hears each item the server has confirmed (finalize answered), with its evidence id.
    public var confirmed: (@Sendable (EvidenceItem, String) -> Void)?

    public init(client: TransrifyClient, queue: EvidenceQueue) {
        self.client = client
        self.queue = queue
    }

    /// The wait after an item's `attempts`-th failure: 2 s doubling, at most 5 minutes.
    public static func retryDelay(afterAttempts attempts: Int) -> TimeInterval {
        min(300, 2 * pow(2, Double(max(0, attempts - 1))))
    }

    /// Uploads every item that is due (all of them with `ignoringBackoff`), in `lanes` at
    /// once: one lane per incident and kind, so that each kind goes up in the order it was
    /// queued (a recording's segments in sequence) while the kinds go side by side. A
    /// network failure stops every lane after the item it is on: the others would fail the
    /// same way.
    ///
    /// An item that failed for the network waits its backoff only while the link stays down:
    /// once an upload of this flush gets through, those items go up in the same flush (a
    /// link back after a cut otherwise cost up to the longest backoff: 4–10 s in `bench
    /// seizure`).
    ///
    /// And when nothing is due but items wait for the network, the first of them is tried
    /// whatever its backoff (a probe): once the recording is over nothing new comes to find
    /// the link back, and the backoff, doubling to 5 minutes through a long cut, would keep
    /// the backlog waiting that long after the link returned. A probe costs one presign,
    /// and each flush makes at most one.
    public func flush(ignoringBackoff: Bool = false) async throws -> Report {
        var (report, notDue) = try await pass { [now] item in
            ignoringBackoff || (item.nextAttemptAt.map { $0 <= now() } ?? true)
        }
        if !ignoringBackoff, report.uploaded.isEmpty, report.deferred.isEmpty,
           let probe = notDue.first(where: { $0.waitingForNetwork == true }) {
            report.absorb(try await pass { $0.id == probe.id }.report)
        }
        if !ignoringBackoff, !report.uploaded.isEmpty, report.waiting > 0 {
            report.absorb(try await pass { $0.waitingForNetwork == true }.report)
        }
        return report
    }

    /// One pass over the queue's items that `due` picks, in lanes; the others count as
    /// waiting, and are returned as listed.
    private func pass(_ due: (EvidenceItem) -> Bool) async throws -> (report: Report, notDue: [EvidenceItem]) {
        var report = Report()
        var notDue: [EvidenceItem] = []
        var order: [String] = []
        var byLane: [String: [EvidenceItem]] = [:]
        for listed in try queue.items() where includeSilent || !listed.isSilent {
            if !due(listed) {
                report.waiting += 1
                notDue.append(listed)
                continue
            }
            let lane = "\(listed.incidentId) \(listed.kind.rawValue)"
            if byLane[lane] == nil { order.append(lane) }
            byLane[lane, default: []].append(listed)
        }
        let offline = LockedValue(false)
        try await withThrowingTaskGroup(of: Report.self) { group in
            var pending = order.makeIterator()
            func startNext() {
                guard let lane = pending.next(), let items = byLane[lane] else { return }
                group.addTask { try await self.upload(items, stoppingWhen: offline) }
            }
            for _ in 0..<max(1, lanes) { startNext() }
            while let done = try await group.next() {
                report.uploaded.merge(done.uploaded) { first, _ in first }
                report.deferred.merge(done.deferred) { first, _ in first }
                startNext()
            }
        }
        return (report, notDue)
    }

    /// One lane: its items in order, until one fails for the network (here or in another lane).
    private func upload(_ items: [EvidenceItem], stoppingWhen offline: LockedValue<Bool>) async throws -> Report {
        var report = Report()
        for listed in items {
            if offline.withLock({ $0 }) { break }
            // Another process is uploading it: not ours to wait for. Read again once claimed:
            // it may have moved on (or left the queue) since it was listed.
            guard let claim = queue.claim(listed.id), let item = try queue.item(listed.id) else { continue }
            defer { withExtendedLifetime(claim) {} }
            var current = item
            do {
                if current.phase == .queued {
                    let presigned = try await client.presign(incidentId: current.incidentId, contentType: current.contentType)
                    current.uploadingSince = now()
                    try queue.save(current)
                    current.uploadingSince = nil
                    try await put(current, to: presigned.url)
                    current.phase = .uploaded
                    current.objectKey = presigned.key
                    try queue.save(current)
                }
                let evidenceId = try await finalize(current)
                try queue.remove(current.id)
                report.uploaded[current.id] = evidenceId
                confirmed?(current, evidenceId)
            } catch let error as TransrifyError {
                current.attempts += 1
                current.nextAttemptAt = now().addingTimeInterval(Self.retryDelay(afterAttempts: current.attempts))
                current.lastError = error.detail
                current.waitingForNetwork = error.kind == .network ? true : nil
                if Self.needsNewUpload(error) {  // the object is missing, expired or does not match: upload again
                    current.phase = .queued
                    current.objectKey = nil
                }
                try queue.save(current)
                report.deferred[current.id] = error.detail
                if error.kind == .network {
                    offline.withLock { $0 = true }
                    break
                }
                // A refused item does not hold up the rest of its kind (a refusal can last):
                // the server orders a recording's segments by their sequence, not their arrival.
            } catch let error as FieldHALError {  // a damaged sealed file: keep it, say why, go on
                current.attempts += 1
                current.nextAttemptAt = now().addingTimeInterval(Self.retryDelay(afterAttempts: current.attempts))
                current.lastError = error.description
                current.waitingForNetwork = nil
                try queue.save(current)
                report.deferred[current.id] = error.description
            }
        }
        return report
    }

    /// Finalize, and up to two more tries after 1 s and 2 s (Req 20.5). A 4xx that says the
    /// object is wrong is not retried here: the item goes back to be uploaded again.
    private func finalize(_ item: EvidenceItem) async throws -> String {
        var attempt = 0
        while true {
            do {
                return try await client.finalize(incidentId: item.incidentId, kind: item.kind, key: item.objectKey ?? "",
                                                 size: item.size, sha256: item.sha256, segment: item.segment.map(Self.wire)).evidenceId
            } catch let error as TransrifyError where attempt < 2 && !Self.needsNewUpload(error) {
                attempt += 1
                try await clock.sleep(for: .seconds(1 << (attempt - 1)))
            }
        }
    }

    static func wire(_ segment: EvidenceItem.Segment) -> EvidenceSegment {
        EvidenceSegment(recording: segment.recording, sequence: segment.sequence,
                        startedAtMs: Int64((segment.startedAt.timeIntervalSince1970 * 1000).rounded()),
                        durationMs: Int64((segment.durationSeconds * 1000).rounded()), previousSha256: segment.previousSHA256)
    }

    static func needsNewUpload(_ error: TransrifyError) -> Bool {
        guard case .http(let status, let code) = error.kind else { return false }
        return status == 403 || code == "OBJECT_MISMATCH" || code == "OBJECT_NOT_FOUND" || code == "OBJECT_NOT_UPLOADED"
    }

    /// PUTs the plaintext, decrypted chunk by chunk as the connection takes it: never in
    /// clear on disk, and memory stays bounded whatever the item's size.
    private func put(_ item: EvidenceItem, to address: String) async throws {
        // Refused before anything is decrypted: the item stays queued and says why.
        let url = try client.uploadURL(address)
        let queue = self.queue
        let read: (@Sendable (Int64) -> Void)? = progress.map { report in { @Sendable sent in report(item, sent) } }
        // Opened before any request: a damaged or missing file fails here. The first body sent
        // reads from this one; a body sent again (a retried connection) opens the file anew.
        let opened = LockedValue<BodyStream?>(try queue.plaintextStream(item, read: read))
        let answer: HTTPSession.Answer
        do {
            // Shielded from cancellation (see `uncancellable`); on cancel the item stays queued.
            answer = try await uncancellable {
                try await HTTPSession.send("PUT", url, headers: [("Content-Type", item.contentType)],
                                           body: .stream(length: item.size) {
                                               try opened.withLock { first in defer { first = nil }; return first }
                                                   ?? queue.plaintextStream(item, read: read)
                                           },
                                           limit: TransrifyClient.maxResponseBytes)
            }
        } catch is CancellationError {
            throw CancellationError()
        } catch let failure as HTTPSession.Failure {
            throw TransrifyError(failure: failure, "PUT \(url.path)")
        } catch let error as FieldHALError {
            throw error  // the sealed file, not the network
        } catch {
            throw TransrifyError(.network, detail: "PUT \(url.path): \(error.localizedDescription)")
        }
        guard (200..<300).contains(answer.status) else {
            let code = (try? JSONDecoder().decode(APIErrorBody.self, from: answer.body))?.code
            throw TransrifyError(.http(status: answer.status, code: code), detail: "PUT \(url.path): HTTP \(answer.status)\(code.map { " \($0)" } ?? "")")
        }
    }

    /// How often `uploadUntilDone` probes the link while items wait for the network (see
    /// `flush`): the longest a backlog waits after the link is back.
    public var networkProbeInterval: TimeInterval = 2

    /// Flushes until nothing uploadable is left or `window` has passed, sleeping until the
    /// next item is due in between, or the next probe while items wait for the network (a
    /// background run after a sign-in, the bench).
    public func uploadUntilDone(within window: Duration) async {
        let deadline = ContinuousClock.now + window
        while ContinuousClock.now < deadline {
            guard (try? await flush()) != nil, let items = try? queue.items() else { return }
            let pending = items.filter { includeSilent || !$0.isSilent }
            guard !pending.isEmpty else { return }
            var nextDue = pending.compactMap(\.nextAttemptAt).min() ?? now()
            if pending.contains(where: { $0.waitingForNetwork == true }) {
                nextDue = min(nextDue, now().addingTimeInterval(networkProbeInterval))
            }
            let wait = max(0.2, nextDue.timeIntervalSince(now()))
            try? await Task.sleep(for: .milliseconds(Int(wait * 1000)))
        }
    }
}
