import FieldHAL
import FieldHALServer
import FieldHALSystem
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A receiver whose fixes the test pushes, handing them over on the pushing thread as the
/// gpsd backend does from its session thread; `end` ends its stream as a backend giving up.
final class PushedLocation: LocationProvider {
    let deviceName: String
    let fixes = Broadcaster<Fix>()
    /// Streams only: the core's default `follow` (a task pumping `watch()`).
    let streamOnly: Bool

    init(_ name: String, streamOnly: Bool = false) {
        deviceName = name
        self.streamOnly = streamOnly
    }

    func watch() -> AsyncThrowingStream<Fix, any Error> { fixes.subscribe() }

    func follow(_ handler: @escaping @Sendable (Fix) -> Void, end: @escaping @Sendable ((any Error)?) -> Void) -> Subscription {
        // What a backend without its own thread gets from the core.
        if streamOnly { return followByPumpingWatch(handler, end: end) }
        return fixes.subscribe(handler, end: end)
    }

    func lastKnownFix() async -> ReceivedFix? { nil }
    func close() async { fixes.finish() }

    func push(_ latitude: Double) { fixes.yield(Fix(mode: .twoD, latitude: latitude, longitude: 0, time: Date())) }
}

/// What a handler follower was given, and on which thread.
final class Heard: Sendable {
    let fixes = Mutex<[Fix]>([])
    let threads = Mutex<Set<UInt>>([])
    let ended = Mutex(false)

    var latitudes: [Double] { fixes.withLock { $0.compactMap(\.latitude) } }
    var problems: [String] { fixes.withLock { $0.compactMap(\.sourceProblem) } }

    func handler(_ fix: Fix) {
        fixes.withLock { $0.append(fix) }
        threads.withLock { _ = $0.insert(UInt(pthread_self())) }
    }
}

@Suite("SharedLocation: one watch fanned out where the fixes arrive")
struct SharedLocationTests {
    @Test func handlersRunOnTheProvidersThreadAndStreamsGetTheSameFixes() async throws {
        let receiver = PushedLocation("pushed")
        let shared = SharedLocation(receiver)
        let heard = Heard()
        let subscription = shared.follow(heard.handler)
        defer { subscription.cancel() }
        var stream = shared.watch().makeAsyncIterator()
        #expect(receiver.fixes.subscriberCount == 1, "one upstream for both followers")

        let pusher = DeviceThread(name: "test-pusher")
        defer { pusher.stop() }
        let pusherThread = try await pusher.run { UInt(pthread_self()) }
        _ = try await pusher.run { receiver.push(1); receiver.push(2) }
        #expect(heard.latitudes == [1, 2], "a handler is called before the push returns")
        #expect(heard.threads.withLock { $0 } == [pusherThread])
        #expect(try await stream.next()?.latitude == 1)
        #expect(try await stream.next()?.latitude == 2)
    }

    @Test func theLastFollowerLeavingStopsTheUpstreamAndANewOneStartsIt() async throws {
        let receiver = PushedLocation("pushed")
        let shared = SharedLocation(receiver)
        let heard = Heard()
        let first = shared.follow(heard.handler)
        receiver.push(1)
        first.cancel()
        // The upstream notices at its next fix that nobody follows.
        receiver.push(2)
        #expect(heard.latitudes == [1])
        #expect(receiver.fixes.subscriberCount == 0)
        #expect(!shared.isWatching)

        let again = Heard()
        let second = shared.follow(again.handler)
        defer { second.cancel() }
        #expect(receiver.fixes.subscriberCount == 1)
        receiver.push(3)
        #expect(again.latitudes == [3])
    }

    @Test(arguments: [false, true])
    func aStreamThatEndsIsSaidAndFollowedAgain(streamOnly: Bool) async throws {
        let receiver = PushedLocation("pushed", streamOnly: streamOnly)
        let shared = SharedLocation(receiver)
        let heard = Heard()
        let subscription = shared.follow(heard.handler)
        defer { subscription.cancel() }
        try await waitUntil("the upstream follows") { receiver.fixes.subscriberCount == 1 }
        receiver.fixes.finish(throwing: FieldHALError(.disconnected, subject: "gps pushed", detail: "the receiver went away"))
        try await waitUntil("the end is said") { !heard.problems.isEmpty }
        #expect(heard.problems.first?.contains("the receiver went away") == true)
        // A finished broadcaster ends every new subscription at once: the restarts go on,
        // backing off, and each says the problem again without ending the follower's watch.
        try await waitUntil("it is tried again") { heard.problems.count >= 2 }
        #expect(shared.watcherCount == 1)
    }

    @Test func aReplacedProviderFeedsTheSameFollowersAndTheOldOneIsLeft() async throws {
        let old = PushedLocation("old")
        let shared = SharedLocation(old)
        let heard = Heard()
        let subscription = shared.follow(heard.handler)
        defer { subscription.cancel() }
        old.push(1)
        let new = PushedLocation("new")
        await shared.replace(with: new)
        #expect(old.fixes.subscriberCount == 0)
        #expect(new.fixes.subscriberCount == 1)
        old.push(99)
        new.push(2)
        #expect(heard.latitudes == [1, 2])

        await shared.replace(with: nil, reason: "the receiver was unloaded")
        #expect(heard.problems == ["the receiver was unloaded"])
        #expect(new.fixes.subscriberCount == 0)
    }

    @Test func closingEndsEveryFollower() async throws {
        let receiver = PushedLocation("pushed")
        let shared = SharedLocation(receiver)
        let heard = Heard()
        let subscription = shared.follow(heard.handler, end: { _ in heard.ended.withLock { $0 = true } })
        defer { subscription.cancel() }
        let stream = shared.watch()
        await shared.close()
        #expect(heard.ended.withLock { $0 })
        #expect(receiver.fixes.subscriberCount == 0)
        var ended = true
        for try await _ in stream { ended = false }
        #expect(ended)
    }
}
