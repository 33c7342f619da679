import Foundation

/// `POST /v1/web/tokens`: a token for the pages of one origin.
public struct APIWebTokenRequest: Sendable, Codable, Equatable {
    /// The page's origin as a browser sends it: `https://kiosk.example`, or `http://localhost:8080`
    /// in development (plain http only for a loopback host).
    public var origin: String
    /// Scope names (`nfc.read`, `haptics`).
    public var allow: [String]
    /// Only these devices (`camera.front`), as a grant's `devices`; left out: every device.
    public var devices: [String]?

    public init(origin: String, allow: [String], devices: [String]? = nil) {
        self.origin = origin
        self.allow = allow
        self.devices = devices
    }
}

/// A web door token as the API shows it; `token` (the text a page presents) only in the
/// answer that issued it, never again.
public struct APIWebToken: Sendable, Codable, Equatable {
    public var id: String
    public var origin: String
    public var allow: [String]
    public var devices: [String]?
    public var issued: Date
    public var token: String?

    public init(id: String, origin: String, allow: [String], devices: [String]?, issued: Date, token: String? = nil) {
        self.id = id
        self.origin = origin
        self.allow = allow
        self.devices = devices
        self.issued = issued
        self.token = token
    }
}

/// `GET /v1/web/tokens`.
public struct APIWebTokens: Sendable, Codable, Equatable {
    public var tokens: [APIWebToken]

    public init(tokens: [APIWebToken]) { self.tokens = tokens }
}

/// What a web origin is, as the web door and its tokens take it.
public enum WebOrigin {
    /// `text` as a browser serialises an origin (`https://kiosk.example`, lowercase, no
    /// default port, no path), or the problem with it. Plain http only for a loopback host:
    /// a page from anywhere else comes over https.
    public static func normalised(_ text: String) -> Result<String, WebOriginProblem> {
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
            return .failure(WebOriginProblem("\"\(text)\" is not an origin: write it as a browser sends it, such as https://kiosk.example"))
        }
        guard scheme == "https" || scheme == "http" else {
            return .failure(WebOriginProblem("\"\(text)\" is not an http or https origin"))
        }
        guard url.user == nil, url.password == nil, url.query == nil, url.fragment == nil, url.path.isEmpty || url.path == "/" else {
            return .failure(WebOriginProblem("\"\(text)\" has more than an origin: leave out the path, query and user, as in \(scheme)://\(host)"))
        }
        if scheme == "http", !isLoopback(host) {
            return .failure(WebOriginProblem("\"\(text)\" is plain http from another machine: serve the page over https (plain http only from localhost, in development)"))
        }
        let port = url.port.flatMap { ($0 == 443 && scheme == "https") || ($0 == 80 && scheme == "http") ? nil : $0 }
        let shown = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return .success("\(scheme)://\(shown)" + (port.map { ":\($0)" } ?? ""))
    }

    /// Whether `host` (a name or an address, IPv6 with or without brackets) is this machine.
    public static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare == "localhost" || bare.hasSuffix(".localhost") || bare == "::1" { return true }
        let parts = bare.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}

public struct WebOriginProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// `event: gap` on an event stream resumed with `Last-Event-ID`: events the client did not
/// get and will not. Said, never hidden; the stream then goes on (with the state first
/// when the daemon no longer had the client's stream).
public struct APIEventGap: Sendable, Codable, Equatable {
    /// The id the client resumed from.
    public var lastEventId: String
    /// How many events were lost, when the daemon knows.
    public var missed: Int?
    public var reason: String

    public init(lastEventId: String, missed: Int?, reason: String) {
        self.lastEventId = lastEventId
        self.missed = missed
        self.reason = reason
    }
}
