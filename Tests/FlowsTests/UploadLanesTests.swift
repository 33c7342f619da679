import FieldHAL
@testable import FieldHALFlows
import Foundation
import Testing
import TestSupport
import Transrify
import TransrifyLabServer

/// Issue 19: uploads in lanes, one per incident and kind, a bounded number at once, over a
/// link with latency (our delaying proxy: each item is three round trips of 100–600 ms).
@Suite(.timeLimit(.minutes(2)))
struct UploadLanesTests {
    @Test func kindsGoUpSideBySideAndEachInTheOrderQueued() async throws {
        let lab = try await EvidenceQueueTests().startLab()
        defer { Task { await lab.stop() } }
        let proxy = try await LatencyProxy.start(targetPort: lab.port, upMilliseconds: "50-150", downMilliseconds: "50-150")
        defer { proxy.stop() }
        var timings: [Int: Duration] = [:]
        for lanes in [1, 3] {
            let state = scratchDirectory("lanes-\(lanes)")
            defer { try? FileManager.default.removeItem(atPath: state) }
            let queue = try openQueue(state)
            // Three kinds, three items each, queued kind by kind interleaved (as a capture does).
            var queued: [EvidenceItem] = []
            for index in 0..<3 {
                for kind in [EvidenceKind.audio, .video, .nearby] {
                    queued.append(try queue.add(kind: kind, contentType: "application/octet-stream", incidentId: "lanes-\(lanes)",
                                                bytes: Array("\(kind.rawValue) \(index) of lanes \(lanes)".utf8)))
                }
            }
            var uploader = EvidenceQueueTests().uploader(queue, lab, port: proxy.port)
            uploader.lanes = lanes
            let confirmed = LockedValue<[EvidenceItem]>([])
            uploader.confirmed = { item, _ in confirmed.withLock { $0.append(item) } }
            let started = ContinuousClock.now
            let report = try await uploader.flush()
            timings[lanes] = ContinuousClock.now - started
            #expect(report.uploaded.count == 9 && report.deferred.isEmpty, "\(report)")
            #expect(try queue.items().isEmpty)
            // Each kind reached the server in the order it was queued.
            let order = confirmed.withLock { $0 }
            for kind in [EvidenceKind.audio, .video, .nearby] {
                #expect(order.filter { $0.kind == kind }.map(\.id) == queued.filter { $0.kind == kind }.map(\.id), "\(kind) with \(lanes) lane(s)")
            }
        }
        let one = try #require(timings[1]), three = try #require(timings[3])
        print("uploads over a 50–150 ms link, 9 items: one lane \(one), three lanes \(three)")
        #expect(three < one * 0.6, "three lanes \(three), one lane \(one)")
    }

    @Test func aLinkThatIsDownStopsEveryLane() async throws {
        let state = scratchDirectory("lanes-down")
        defer { try? FileManager.default.removeItem(atPath: state) }
        let queue = try openQueue(state)
        for index in 0..<4 {
            for kind in [EvidenceKind.audio, .video, .photo, .nearby] {
                try queue.add(kind: kind, contentType: "application/octet-stream", incidentId: "down", bytes: [UInt8(index)])
            }
        }
        // Nothing listens on the port: every attempt fails at once for the network.
        let lab = try await EvidenceQueueTests().startLab()
        let port = lab.port
        await lab.stop()
        let uploader = EvidenceQueueTests().uploader(queue, lab, port: port)
        let report = try await uploader.flush()
        #expect(report.uploaded.isEmpty)
        // At most one attempt per lane running at once (3), not one per item (16).
        #expect((1...3).contains(report.deferred.count), "\(report.deferred.count) items tried while the link was down")
        #expect(try queue.items().count == 16, "nothing lost")
    }
}
