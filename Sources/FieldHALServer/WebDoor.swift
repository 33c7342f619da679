import FieldHAL
import FieldHALAPI
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix

/// `[web]`: the web door, off unless the section names where it listens.
public struct WebDoorSettings: Sendable, Equatable {
    /// A loopback address (`127.0.0.1`, `::1`) and the port.
    public var address: String
    public var port: Int
    /// The `Host` values a request may carry: the address and `localhost`, with the port.
    /// Anything else is a name that resolved here without being this kit (DNS rebinding).
    public var hosts: Set<String>

    public static let specs: [ParameterSpec] = [
        ParameterSpec("listen", .string, required: true,
                      help: "the loopback address and port pages reach the kit at, e.g. \"127.0.0.1:8480\" (no [web] section: no web door)"),
    ]

    /// The `[web]` section, or nil when there is none; a section that names anything but a
    /// loopback address and a port is a configuration error naming the key.
    public init?(settings: PluginParameters?, file: String) throws(ConfigError) {
        guard let settings else { return nil }
        let (address, port) = try LoopbackAddress.parse(settings.string("listen") ?? "", file: file, key: "web.listen",
                                                         serving: "the web door serves this machine's pages only (127.0.0.1 or ::1)")
        self.address = address
        self.port = port
        let shown = address.contains(":") ? "[\(address)]" : address
        hosts = ["\(shown):\(port)", "localhost:\(port)"]
    }
}

/// The web door's checks, before any route: a page reaches the kit only from an origin a
/// token is bound to, with that token, on a `Host` that is this kit.
///
/// - `Host` must be the door's own address or `localhost` (a rebinding page's name is not).
/// - A preflight (`OPTIONS`) is answered only for an origin some token is bound to, with
///   Chrome's private/local network answer when asked for it; any other origin gets a 403
///   without CORS headers, so the browser refuses the request it wanted to make.
/// - The token comes as `Authorization: Bearer …`, or as `access_token` in the query where a
///   page cannot set headers (EventSource, `<img>`); the door takes it out of the query before
///   the route reads it.
/// - A request with an `Origin` must come from its token's origin. One without (an `<img>`'s,
///   or a tool's) may only read: a no-cors request's answer is opaque to the page that made it.
struct WebDoorMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    let settings: WebDoorSettings
    let host: APIHost

    static let allowedHeaders = "authorization, content-type, last-event-id"
    static let clientFiles: [String: (type: String, bytes: [UInt8])] = [
        "/fieldhal.js": ("text/javascript; charset=utf-8", PackageResources.fieldhal_js),
        "/fieldhal.d.ts": ("application/typescript; charset=utf-8", PackageResources.fieldhal_d_ts),
    ]
    static let allowedMethods = "GET, POST, DELETE"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let what = "\(request.method) \(request.uri.path)"
        let authority = request.head.authority ?? ""
        guard settings.hosts.contains(authority.lowercased()) else {
            return APIErrorMiddleware.response(APIProblem(
                kind: APIProblem.forbidden, subject: "Host",
                detail: "\"\(TerminalText.escaped(authority))\" is not this web door (it answers to \(settings.hosts.sorted().joined(separator: " and ")))",
                advice: "reach the kit at http://\(settings.hosts.sorted().last ?? "")", status: 403))
        }
        // The JavaScript client: public code, no token, readable from any page.
        if request.method == .get, let script = Self.clientFiles[request.uri.path] {
            var response = Response(status: .ok, headers: [.contentType: script.type, .cacheControl: "no-cache"],
                                    body: .init(byteBuffer: ByteBuffer(bytes: script.bytes)))
            response.headers[.accessControlAllowOrigin] = "*"
            return response
        }
        let book = host.webTokens
        let origin = request.headers[.origin]
        let known = origin.map { origin in book?.knows(origin: origin) == true } ?? false
        if request.method == .options {
            guard let origin, known else {
                return APIErrorMiddleware.response(APIProblem(
                    kind: APIProblem.forbidden, subject: "origin \(TerminalText.escaped(origin ?? "(none)"))",
                    detail: "no web token is bound to this origin",
                    advice: "issue one: fieldhal web token add --origin ORIGIN --allow SCOPES", status: 403))
            }
            var response = Response(status: .noContent)
            response.headers[.accessControlAllowMethods] = Self.allowedMethods
            response.headers[.accessControlAllowHeaders] = Self.allowedHeaders
            response.headers[.accessControlMaxAge] = "600"
            // Chrome's Private Network Access preflight (a public page reaching loopback).
            if request.headers[.init("Access-Control-Request-Private-Network")!]?.lowercased() == "true" {
                response.headers[.init("Access-Control-Allow-Private-Network")!] = "true"
            }
            return Self.allowing(origin, response)
        }
        var response: Response
        do {
            let (presented, stripped) = try Self.token(of: request)
            guard let presented else {
                throw APIProblem(kind: APIProblem.forbidden, subject: what, detail: "no web token with the request",
                                 advice: "send the page's token as Authorization: Bearer TOKEN (or access_token=TOKEN where no header can be set)",
                                 status: 401)
            }
            guard let grant = book?.grant(presented: presented), case .token(let id, let bound) = grant.who else {
                throw APIProblem(kind: APIProblem.forbidden, subject: what, detail: "the web token is not one this kit issued, or it was revoked",
                                 advice: "issue the page a new one: fieldhal web token add --origin ORIGIN --allow SCOPES", status: 401)
            }
            if let origin {
                guard origin == bound else {
                    throw APIProblem(kind: APIProblem.forbidden, subject: what,
                                     detail: "token \(id) is for \(bound), not \(TerminalText.escaped(origin))",
                                     advice: "issue a token for this origin: fieldhal web token add --origin \(TerminalText.escaped(origin)) --allow SCOPES",
                                     status: 403)
                }
            } else if request.method != .get && request.method != .head {
                throw APIProblem(kind: APIProblem.forbidden, subject: what, detail: "a request without an Origin may only read",
                                 advice: "send it from the page (fetch sends Origin), or use the Unix socket from a program", status: 403)
            }
            var context = context
            context.webCaller = grant
            response = try await next(stripped, context)
        } catch let problem as APIProblem {
            response = APIErrorMiddleware.response(problem)
            if problem.status == 401 { response.headers[.wwwAuthenticate] = "Bearer" }
        }
        return known ? Self.allowing(origin!, response) : response
    }

    /// `response` readable by pages of `origin` (and only them: the answer varies by Origin).
    static func allowing(_ origin: String, _ response: Response) -> Response {
        var response = response
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.vary] = "Origin"
        return response
    }

    /// The request's token, and the request without `access_token` in its query. A token
    /// both ways, or twice, is a 400: which one counts would be a guess.
    static func token(of request: Request) throws -> (String?, Request) {
        var presented: [String] = []
        if let header = request.headers[.authorization] {
            let parts = header.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, parts[0].lowercased() == "bearer" else {
                throw APIProblem(kind: FieldHALError.Kind.invalidArgument.rawValue, subject: "Authorization",
                                 detail: "not a Bearer token", advice: "send Authorization: Bearer TOKEN", status: 400)
            }
            presented.append(String(parts[1]).trimmingCharacters(in: .whitespaces))
        }
        var stripped = request
        if var path = request.head.path, let mark = path.firstIndex(of: "?") {
            let query = path[path.index(after: mark)...].split(separator: "&", omittingEmptySubsequences: false)
            let kept = query.filter { item in
                guard item.hasPrefix("access_token=") else { return true }
                presented.append(String(item.dropFirst("access_token=".count)).removingPercentEncoding ?? "")
                return false
            }
            if kept.count != query.count {
                path = String(path[..<mark]) + (kept.isEmpty ? "" : "?" + kept.joined(separator: "&"))
                var head = request.head
                head.path = path
                stripped = Request(head: head, body: request.body)
            }
        }
        guard presented.count <= 1 else {
            throw APIProblem(kind: FieldHALError.Kind.invalidArgument.rawValue, subject: "token",
                             detail: "the request carries \(presented.count) tokens", advice: "send one", status: 400)
        }
        return (presented.first, stripped)
    }
}

/// The web door (`[web] listen`): the API's routes and events over HTTP on a loopback
/// address, for the pages of a kiosk's browser, each request checked by
/// `WebDoorMiddleware`. Off unless configured.
public struct WebDoorServer: Sendable {
    public let settings: WebDoorSettings
    public let api: APIServer
    /// Open connections at once; past it a new one is closed (a flood from a local program
    /// meets this bound, not the daemon's descriptors).
    public var connections = 256
    private let ledger = ConnectionLedger()

    public init(settings: WebDoorSettings, api: APIServer) {
        var api = api
        // The event stream goes through SwiftNIO here: only the Unix socket's listener keeps
        // a connection's descriptor for the stream (`UnixSocketListener`).
        api.writesEventsDirectly = false
        self.settings = settings
        self.api = api
    }

    /// Serves until cancelled; calls `onListening` once the port accepts connections.
    public func run(onListening: @escaping @Sendable () async -> Void = {}) async throws {
        var quiet = Logger(label: "fieldhal.web")
        quiet.logLevel = .critical
        let limits = api.limits, ledger = self.ledger, connections = self.connections
        let app = Application(
            router: api.makeRouter(webDoor: settings),
            server: HTTPServerBuilder { responder in
                GatedHTTP1Channel(
                    inner: HTTP1Channel(responder: responder, configuration: .init(
                        additionalChannelHandlers: [RequestHeadGuard(deadline: limits.headDeadline)], idleTimeout: TimeAmount(api.idleTimeout))),
                    limits: limits, ledger: ledger,
                    // A TCP peer has no credentials: every connection counts against one bound.
                    admit: { _, ledger in ledger.take(0, limit: connections) ? .admitted(countedAs: 0) : .dropped })
            },
            configuration: .init(address: .hostname(settings.address, port: settings.port), serverName: nil, backlog: limits.backlog),
            onServerRunning: { _ in await onListening() },
            eventLoopGroupProvider: .shared(MultiThreadedEventLoopGroup.singleton.next()),
            logger: quiet)
        try await app.runService(gracefulShutdownSignals: [])
    }
}
