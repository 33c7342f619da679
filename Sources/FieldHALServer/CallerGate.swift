import FieldHAL
import FieldHALAPI
import Foundation
import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import Synchronization

/// Who may hold a connection to the API, decided when the connection is accepted, before a
/// byte of HTTP is parsed.
///
/// The socket is open to every local user (0666), so a connection must cost the daemon
/// nothing unless its caller may use something: a flood of half-open connections from a user
/// without a grant once held the daemon at its descriptor limit, and a duress sign-in that
/// got in then lost its evidence. So:
///
/// - a caller with no scope at all reads its 403 (the documented error body, with the advice
///   to get a grant) as soon as its request head is in, at most `refusalDeadline` later, and
///   is closed; a caller with no scope may hold `unscopedAtOnce` such connections at once;
/// - every other caller but root and the daemon's own user may hold `perCaller` connections
///   at once (an event stream is one): past that, a 429 and the connection closed;
/// - a request head must be whole within `headDeadline` of the connection (or of the last
///   answer on it): a client dripping a header line now and then is let go.
public struct CallerGateLimits: Sendable, Equatable {
    public var perCaller = 256
    public var unscopedAtOnce = 8
    public var refusalDeadline: Duration = .seconds(2)
    public var headDeadline: Duration = .seconds(10)
    /// The longest request head a refused caller may send before it is answered anyway.
    public var refusalHeadBytes = 16 * 1024
    /// The listening socket's queue of connections not yet accepted.
    public var backlog = 4096

    public init() {}
}

/// Open connections per uid, across the daemon's event loops.
final class ConnectionLedger: Sendable {
    private let open = Mutex<[UInt32: Int]>([:])

    /// Counts one more for `uid` unless it already holds `limit`.
    func take(_ uid: UInt32, limit: Int) -> Bool {
        open.withLock { counts in
            let held = counts[uid, default: 0]
            guard held < limit else { return false }
            counts[uid] = held + 1
            return true
        }
    }

    func give(_ uid: UInt32) {
        open.withLock { counts in
            let held = counts[uid, default: 1] - 1
            counts[uid] = held > 0 ? held : nil
        }
    }

    func held(by uid: UInt32) -> Int { open.withLock { $0[uid, default: 0] } }
}

/// SwiftNIO's HTTP/1.1 channel for the API, with the gate in front of it and the head
/// deadline and error bodies behind the HTTP decoder.
struct GatedHTTP1Channel: ServerChildChannel {
    /// A connection past the gate: with Hummingbird's HTTP pipeline when admitted, with only
    /// the refusal when not. A refused or dropped connection gets no `NIOAsyncChannel` at all:
    /// one made and then dropped unconsumed (its peer gone before it became active, under a
    /// flood) is a precondition failure in SwiftNIO that ends the process.
    struct Connection: ServerChildChannelValue {
        let channel: any Channel
        let http: HTTP1Channel.Value?
    }

    typealias Value = Connection

    let inner: HTTP1Channel
    let limits: CallerGateLimits
    let ledger: ConnectionLedger
    /// What becomes of a caller's connection (nil: the kernel did not say who it is, and
    /// the routes refuse it as they always have).
    let admit: @Sendable (PeerCredentials?, _ ledger: ConnectionLedger) -> Admission

    enum Admission: Sendable {
        /// Let in; `countedAs` is given back to the ledger when the connection closes.
        case admitted(countedAs: UInt32?)
        /// Answered once its head is in (or its deadline passes), then closed: the problem for
        /// the request line ("GET /v1/status"), or for none when the head never came whole.
        case refused(@Sendable (String?) -> APIProblem, countedAs: UInt32?)
        /// Closed at once: the caller holds all the connections it may.
        case dropped

        /// The caller's share taken for a connection that never got set up, given back.
        func giveBack(to ledger: ConnectionLedger) {
            switch self {
            case .admitted(let counted?), .refused(_, let counted?): ledger.give(counted)
            default: break
            }
        }
    }

    struct Dropped: Error {}

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let ledger = self.ledger, admit = self.admit
        return PeerCredentials.future(of: channel).flatMap { caller -> EventLoopFuture<Value> in
            setup(channel: channel, admission: admit(caller, ledger), logger: logger)
        }
    }

    /// The connection set up as `admission` says (decided already, by `admit`).
    func setup(channel: any Channel, admission: Admission, logger: Logger) -> EventLoopFuture<Value> {
        let limits = self.limits, ledger = self.ledger
        switch admission {
        case .dropped:
            // A failed set-up alone leaves the connection open (and its descriptor held).
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(Dropped())
        case .refused(let refusal, let counted):
            if let counted { channel.closeFuture.whenComplete { _ in ledger.give(counted) } }
            return channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(
                    RefusalHandler(refusal: refusal, deadline: limits.refusalDeadline, headBytes: limits.refusalHeadBytes))
                return Connection(channel: channel, http: nil)
            }
        case .admitted(let counted):
            if let counted { channel.closeFuture.whenComplete { _ in ledger.give(counted) } }
            return inner.setup(channel: channel, logger: logger).map { Connection(channel: channel, http: $0) }
        }
    }

    func handle(value: Value, logger: Logger) async {
        if let http = value.http {
            await inner.handle(value: http, logger: logger)
        } else {
            // The refusal handler answers and closes on its own (2 s at most).
            try? await value.channel.closeFuture.get()
        }
    }
}

/// Answers a refused caller with its problem as soon as its request head is in, never
/// handing a byte to the HTTP decoder behind it, then closes the connection. Reading the
/// head first matters: a Unix socket closed with the client's request unread makes the
/// client's next read fail (ECONNRESET) where it should read the 403.
final class RefusalHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let refusal: @Sendable (String?) -> APIProblem
    private let deadline: Duration
    private let headBytes: Int
    private var head: [UInt8] = []
    private var answered = false
    private var timer: Scheduled<Void>?

    init(refusal: @escaping @Sendable (String?) -> APIProblem, deadline: Duration, headBytes: Int) {
        self.refusal = refusal
        self.deadline = deadline
        self.headBytes = headBytes
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: TimeAmount(deadline)) {
            let (handler, context) = loopBound.value
            handler.answer(context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }  // a body after the head: read and dropped
        let buffer = unwrapInboundIn(data)
        head.append(contentsOf: buffer.readableBytesView.prefix(headBytes - head.count))
        if head.count >= headBytes || RequestHead.end(in: head) != nil { answer(context) }
    }

    private func answer(_ context: ChannelHandlerContext) {
        guard !answered else { return }
        answered = true
        timer?.cancel()
        let problem = refusal(RequestHead.requestLine(in: head))
        let body = (try? FieldHALAPI.encoder.encode(APIErrorBody(error: problem))) ?? Data("{}".utf8)
        var bytes = Array("HTTP/1.1 \(problem.status) Forbidden\r\ncontent-type: application/json\r\ncontent-length: \(body.count)\r\nconnection: close\r\n\r\n".utf8)
        bytes += body
        // The answer, then our side closed: a client that sends its body after its head (as
        // Python's http.client does) must not meet a closed socket (EPIPE) before it reads
        // the 403. What it still sends is read and dropped until it closes, or for a second
        // at most; then the connection is closed whatever it does.
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(bytes: bytes))).whenComplete { _ in
            loopBound.value.close(mode: .output, promise: nil)
        }
        timer = context.eventLoop.scheduleTask(in: .seconds(1)) {
            loopBound.value.close(promise: nil)
        }
    }
}

/// Behind the HTTP decoder: a request head must be whole within the deadline, and a request
/// the decoder refuses (a garbage request line, a negative or doubled length, 100 KiB of
/// headers) gets the API's error body, as every other refusal does, rather than the empty
/// 400 the server library would send.
final class RequestHeadGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let deadline: Duration
    private var timer: Scheduled<Void>?
    /// Between a request's head and the end of its answer: a deadline does not run, and a
    /// parse error belongs to the route reading the body.
    private var inRequest = false
    private var closing = false

    init(deadline: Duration) { self.deadline = deadline }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        arm(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) { timer?.cancel() }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        context.fireChannelInactive()
    }

    private func arm(_ context: ChannelHandlerContext) {
        timer?.cancel()
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: TimeAmount(deadline)) {
            // No whole head in time: the connection is let go. No answer is written: an
            // idle keep-alive connection closed is what every client expects.
            loopBound.value.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head = unwrapInboundIn(data) {
            timer?.cancel()
            timer = nil
            inRequest = true
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            inRequest = false
            if !closing { arm(context) }
        }
        context.write(data, promise: promise)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parse = error as? HTTPParserError, !inRequest, !closing else {
            context.fireErrorCaught(error)
            return
        }
        closing = true
        timer?.cancel()
        let problem = Self.problem(for: parse)
        let body = (try? FieldHALAPI.encoder.encode(APIErrorBody(error: problem))) ?? Data("{}".utf8)
        var fields: HTTPFields = [.contentType: "application/json", .connection: "close"]
        fields[.contentLength] = String(body.count)
        context.write(wrapOutboundOut(.head(HTTPResponse(status: .init(code: problem.status), headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(bytes: body))), promise: nil)
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in loopBound.value.close(promise: nil) }
    }

    /// The decoder's refusal in the API's words. `subject` is "request" for a head the
    /// decoder refused, "request body" for a body cut short or badly framed.
    static func problem(for error: HTTPParserError, subject: String = "request") -> APIProblem {
        let framing = "send HTTP/1.1 as api/openapi.yaml gives it, with one Content-Length or a chunked body, never both"
        let (status, detail, advice): (Int, String, String) = switch error {
        case .headerOverflow: (431, "the request head is larger than the daemon reads (80 KiB)", "send fewer or shorter headers")
        case .invalidEOFState, .closedConnection: (400, "the body ended before its Content-Length or last chunk", "send the whole body before closing")
        case .invalidChunkSize: (400, "a chunk size is not a hexadecimal number", framing)
        case .invalidContentLength: (400, "Content-Length is not a whole number of bytes", framing)
        case .unexpectedContentLength: (400, "Content-Length and Transfer-Encoding together, or a body where none may be", framing)
        case .invalidMethod: (400, "the request line names no HTTP method", "start with a request line such as GET /v1/status HTTP/1.1")
        case .invalidVersion: (400, "not HTTP/1.1 (HTTP/2 is not served on this socket)", "speak HTTP/1.1")
        case .invalidURL, .invalidPath, .invalidQueryString, .invalidFragment, .invalidHost, .invalidPort:
            (400, "the request target is not a path the daemon can read", "use a path such as /v1/status")
        case .invalidHeaderToken, .invalidCharactersUsed, .lfExpected: (400, "a header line is malformed", "send header lines as Name: value, each ending in CRLF")
        default: (400, "not an HTTP/1.1 request the daemon can read", framing)
        }
        return APIProblem(kind: FieldHALError.Kind.invalidArgument.rawValue, subject: subject, detail: detail, advice: advice, status: status)
    }
}

extension TimeAmount {
    /// A Swift `Duration` as SwiftNIO's time amount, to the nanosecond.
    init(_ duration: Duration) {
        self = .nanoseconds(Int64(duration.components.seconds) * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }
}
