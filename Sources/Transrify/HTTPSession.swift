import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The one HTTP client every Transrify request and evidence upload goes through
/// (AsyncHTTPClient on SwiftNIO's shared event loops).
///
/// What it guarantees, whatever the server does:
/// - a redirect is followed only within the request's origin (scheme, host, port): a 307
///   re-sends the body, and the body is a PIN, the tenant key or evidence;
/// - an answer's body is counted as it arrives and the exchange is given up at its limit, the
///   connection closed: a hostile server cannot make the kit hold more than the limit;
/// - a request body can be streamed (evidence, decrypted as it is sent: never in clear on disk).
///
/// Not URLSession: on Linux (swift-corelibs-foundation) its delegate gets the body through a
/// queue with no backpressure, and a cancel lands only once that queue drains — an endless
/// answer grew the process to 3 GB before the limit could stop it (measured); and cancelling
/// one of its uploads could crash the process.
public enum HTTPSession {
    /// Why an exchange ended without an answer to use.
    public enum Failure: Error, Sendable, CustomStringConvertible {
        /// The answer's body passed `limit` bytes (declared or received).
        case tooLarge(limit: Int)
        /// The server redirected to another origin; nothing was sent there.
        case crossOriginRedirect(to: String)
        /// No HTTP answer: DNS, refused, reset, timed out, too many redirects.
        case transport(String)

        public var description: String {
            switch self {
            case .tooLarge(let limit): "the answer's body is larger than \(limit) bytes"
            case .crossOriginRedirect(let to): "redirected to another origin (\(to)); not followed"
            case .transport(let why): why
            }
        }
    }

    /// A request's body.
    public enum Body: Sendable {
        case empty
        case bytes(Data)
        /// `length` bytes from a fresh `BodyStream` for each sending (a redirect sends again).
        case stream(length: Int64, open: @Sendable () throws -> BodyStream)
    }

    /// An answer: its status and its whole body (within the limit).
    public struct Answer: Sendable {
        public let status: Int
        public let body: Data
    }

    /// Redirects followed within one origin before giving up.
    public static let maxRedirects = 5

    /// Connect within 15 s; a silence of `idleTimeout` while an answer is awaited or read
    /// ends the exchange (an upload over a slow link may take long, but never stalls that long).
    public static let idleTimeout: TimeAmount = .seconds(120)

    private static let client: HTTPClient = {
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow,
                                                     timeout: .init(connect: .seconds(15), read: idleTimeout),
                                                     decompression: .disabled)
        configuration.httpVersion = .http1Only
        // A refused or failed connection is the answer: the kit says "Network error" at once
        // and its callers retry on their own schedules (AsyncHTTPClient would otherwise try
        // again until the deadline: 15 s for a kit that is simply offline).
        configuration.connectionPool.retryConnectionEstablishment = false
        return HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
    }()

    /// Starts the threads requests run on (NIO's shared event loops and blocking-work pool),
    /// so that a process's thread names (`ps -eL`) do not depend on whether it has made a
    /// request: after a duress sign-in the kit sends an alert and uploads, after a normal one
    /// it may send nothing (`lab/stealth-check`).
    public static func prepare() async {
        _ = client
        try? await NIOThreadPool.singleton.runIfActive {}
    }

    /// The slowest link an upload is given time for when no deadline is set: a body of
    /// N bytes gets 30 s plus N / 16 KiB per second (at least a minute).
    public static let slowestLink = 16 * 1024

    /// The deadline for an exchange that sets none: no exchange is without one, so that a
    /// server that trickles its answer a byte at a time cannot hold the kit (and its
    /// connection) forever.
    public static func defaultDeadline(for body: Body) -> Duration {
        let bytes: Int64 = switch body {
        case .empty: 0
        case .bytes(let data): Int64(data.count)
        case .stream(let length, _): length
        }
        return max(.seconds(60), .seconds(30) + .seconds(bytes / Int64(slowestLink)))
    }

    /// Sends the request, following redirects within its origin, and returns the answer, its
    /// body at most `limit` bytes. `deadline`: the whole exchange's, the answer's body
    /// included (nil: `defaultDeadline(for:)`); past it the connection is closed and the
    /// exchange fails as a network error.
    public static func send(_ method: String, _ url: URL, headers: [(String, String)] = [], body: Body = .empty,
                            limit: Int, deadline: Duration? = nil) async throws -> Answer {
        let allowed = deadline ?? defaultDeadline(for: body)
        let end = ContinuousClock.now + allowed
        let until = NIODeadline.now() + .nanoseconds(Int64(allowed.components.seconds) * 1_000_000_000 + allowed.components.attoseconds / 1_000_000_000)
        var url = url, method = method, body = body
        for _ in 0...maxRedirects {
            var request = HTTPClientRequest(url: url.absoluteString)
            request.method = HTTPMethod(rawValue: method)
            for (name, value) in headers { request.headers.add(name: name, value: value) }
            let stream: BodyStream?
            switch body {
            case .empty: stream = nil
            case .bytes(let data): request.body = .bytes(ByteBuffer(bytes: data)); stream = nil
            case .stream(let length, let open):
                let opened = try open()
                request.body = .stream(opened, length: .known(length))
                stream = opened
            }
            let response: HTTPClientResponse
            do {
                response = try await client.execute(request, deadline: until)
            } catch {
                if let failure = stream?.failure { throw failure }  // the body's own error (a damaged file), not the network's
                throw Failure.transport(describe(error))
            }
            let status = Int(response.status.code)
            if [301, 302, 303, 307, 308].contains(status), let location = response.headers.first(name: "Location") {
                guard let next = URL(string: location, relativeTo: url)?.absoluteURL else {
                    throw Failure.transport("redirected to \"\(location)\", which is not a URL")
                }
                guard TransportPolicy.sameOrigin(url, next) else { throw Failure.crossOriginRedirect(to: next.absoluteString) }
                // As browsers do: 303, and 301/302 after a POST, fetch the new place with GET.
                if status == 303 || (status <= 302 && method == "POST") {
                    method = "GET"
                    body = .empty
                }
                url = next
                continue
            }
            if let declared = response.headers.first(name: "Content-Length").flatMap(Int.init), declared > limit {
                throw Failure.tooLarge(limit: limit)
            }
            // The body within the same deadline: read in a child task that the deadline
            // cancels, which makes AsyncHTTPClient close the connection.
            let collected: Data? = try await withThrowingTaskGroup(of: Data?.self) { group in
                group.addTask {
                    var collected = Data()
                    do {
                        for try await chunk in response.body {
                            guard collected.count + chunk.readableBytes <= limit else { throw Failure.tooLarge(limit: limit) }
                            collected.append(contentsOf: chunk.readableBytesView)
                        }
                    } catch let failure as Failure {
                        throw failure
                    } catch {
                        throw Failure.transport(describe(error))
                    }
                    return collected
                }
                group.addTask {
                    // A caller's cancellation is not the deadline: it ends the exchange as such.
                    try await Task.sleep(until: end, clock: .continuous)
                    return nil
                }
                defer { group.cancelAll() }
                return try await group.next() ?? nil
            }
            guard let collected else {
                throw Failure.transport("the answer did not arrive whole within \(allowed.components.seconds) s; the connection was closed")
            }
            return Answer(status: status, body: collected)
        }
        throw Failure.transport("more than \(maxRedirects) redirects")
    }

    private static func describe(_ error: any Error) -> String {
        if let error = error as? HTTPClientError { return "\(error)" }
        if let error = error as? IOError { return error.description }
        return String(describing: error)
    }
}

/// A request body read chunk by chunk as the connection takes it (evidence, decrypted as it is
/// sent): each read is blocking work and runs on NIO's blocking-work pool, never on the
/// cooperative pool, and the next chunk is read only when the last one has been handed to the
/// connection.
public struct BodyStream: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer

    /// The next chunk, or nil at the end; blocking.
    private let read: @Sendable () throws -> [UInt8]?
    private let failed = FailureBox()

    public init(read: @escaping @Sendable () throws -> [UInt8]?) {
        self.read = read
    }

    /// What the reading threw, if it did: the exchange reports it rather than the network's view of it.
    var failure: (any Error)? { failed.error.withLock { $0 } }

    private final class FailureBox: Sendable {
        let error = Mutex<(any Error)?>(nil)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let stream: BodyStream

        public mutating func next() async throws -> ByteBuffer? {
            let read = stream.read
            do {
                guard let bytes = try await NIOThreadPool.singleton.runIfActive({ try read() }) else { return nil }
                return ByteBuffer(bytes: bytes)
            } catch {
                stream.failed.error.withLock { $0 = error }
                throw error
            }
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }
}
