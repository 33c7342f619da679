import Foundation

/// Where the kit may send what it sends: the PIN and the tenant key go to the API, evidence
/// to the URL presign returns. Outside development everything travels over TLS, and evidence
/// goes only to the API's own host or to storage hosts the configuration names, so a
/// tampered or hostile presign answer cannot route a capture elsewhere (issue 18).
public struct TransportPolicy: Sendable, Equatable {
    /// `http://` and `ws://` allowed (development against the lab server on loopback).
    public var allowsCleartext: Bool
    /// Hosts evidence may be PUT to besides the API's own (`[transrify] upload_hosts`),
    /// lowercased; a leading `*.` matches any subdomain.
    public var uploadHosts: [String]

    public init(allowsCleartext: Bool, uploadHosts: [String] = []) {
        self.allowsCleartext = allowsCleartext
        self.uploadHosts = uploadHosts.map { $0.lowercased() }
    }

    /// TLS only; the default for anything but development.
    public static let strict = TransportPolicy(allowsCleartext: false)

    /// Whether `scheme` (http/https, ws/wss) may be used.
    public func allows(scheme: String?) -> Bool {
        switch scheme?.lowercased() {
        case "https", "wss": true
        case "http", "ws": allowsCleartext
        default: false
        }
    }

    /// The URL evidence may be PUT to, or a `.refusedURL` error that says why and what to
    /// change. `apiBase` is the API's base URL: its host is always allowed.
    public func uploadURL(_ text: String, apiBase: URL) throws -> URL {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
            throw TransrifyError(.refusedURL, detail: "presign returned an upload URL that does not parse")
        }
        guard allows(scheme: scheme) else {
            throw TransrifyError(.refusedURL, detail: "presign returned a \(scheme):// upload URL (host \(host)); evidence goes only over https outside development")
        }
        guard allows(host: host, apiBase: apiBase) else {
            throw TransrifyError(.refusedURL, detail: "presign returned an upload URL on \(host), which is neither the API's host nor in [transrify] upload_hosts — add it there if it is your tenant's storage")
        }
        return url
    }

    func allows(host: String, apiBase: URL) -> Bool {
        if host == apiBase.host?.lowercased() { return true }
        // A lab on this machine may answer as 127.0.0.1 to a kit that calls it localhost.
        if Self.isLoopback(apiBase), let url = URL(string: "http://\(host.contains(":") ? "[\(host)]" : host)/"), Self.isLoopback(url) { return true }
        return uploadHosts.contains { allowed in
            if allowed.hasPrefix("*.") { return host.hasSuffix(allowed.dropFirst()) && host.count > allowed.count - 1 }
            return host == allowed
        }
    }

    /// Whether `url`'s host is this machine (`localhost`, 127.0.0.0/8, `::1`).
    public static func isLoopback(_ url: URL) -> Bool {
        guard var host = url.host?.lowercased() else { return false }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        if host == "localhost" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    /// Whether a redirect from `from` to `to` may be followed: only within one origin
    /// (scheme, host and port), so that a request's body and headers — a PIN, the tenant key,
    /// evidence — never reach a server they were not addressed to.
    public static func sameOrigin(_ from: URL?, _ to: URL?) -> Bool {
        guard let from, let to, let fromScheme = from.scheme?.lowercased(), let toScheme = to.scheme?.lowercased() else { return false }
        func port(_ url: URL, _ scheme: String) -> Int? { url.port ?? (scheme == "https" ? 443 : scheme == "http" ? 80 : nil) }
        return fromScheme == toScheme && from.host?.lowercased() == to.host?.lowercased() && port(from, fromScheme) == port(to, toScheme)
    }
}
