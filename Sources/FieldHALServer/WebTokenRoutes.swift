import FieldHAL
import FieldHALAPI
import Hummingbird

/// The web door's tokens as the daemon keeps them. The server holds no secret and imports no
/// crypto: the daemon hands in the book (as it hands in the flows).
public protocol APIWebTokenBook: Sendable {
    func tokens() throws -> [APIWebToken]
    /// A new token; its `token` text is in this answer only.
    func issue(origin: String, allow: [APIScope], devices: [String]?) throws -> APIWebToken
    /// Nil when there is no such token.
    func revoke(id: String) throws -> APIWebToken?
    /// Whether a token is bound to `origin` (its preflights are answered).
    func knows(origin: String) -> Bool
    /// The grant of the token whose text is `presented`, or nil (unknown, revoked, malformed).
    func grant(presented: String) -> APIAuthorisation.Grant?
}

/// `GET|POST /v1/web/tokens`, `DELETE /v1/web/tokens/{id}`: only root, the daemon's user and
/// the control group, over the Unix socket (a token never manages tokens).
extension APIServer {
    func addWebTokenRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.get("web/tokens") { request, context in
            try host.authoriseTokenManagement(try await context.caller(host), doing: "GET /v1/web/tokens")
            _ = try Self.query(request, taking: [])
            return try Self.json(APIWebTokens(tokens: try host.requireWebTokens().tokens()))
        }
        v1.post("web/tokens") { request, context in
            try host.authoriseTokenManagement(try await context.caller(host), doing: "POST /v1/web/tokens")
            let body = try await APIRequestBody.decode(APIWebTokenRequest.self, request, fields: ["origin", "allow", "devices"])
            let origin: String
            switch WebOrigin.normalised(body.origin) {
            case .success(let normalised): origin = normalised
            case .failure(let problem): throw FieldHALError(.invalidArgument, subject: "origin", detail: problem.description)
            }
            var scopes: [APIScope] = []
            for name in body.allow {
                guard let scope = APIScope(rawValue: name) else {
                    throw FieldHALError(.invalidArgument, subject: "allow", detail: "no scope \"\(TerminalText.escaped(name))\"",
                                        advice: "the scopes are " + APIScope.allCases.map(\.rawValue).joined(separator: ", "))
                }
                if !scopes.contains(scope) { scopes.append(scope) }
            }
            guard !scopes.isEmpty else {
                throw FieldHALError(.invalidArgument, subject: "allow", detail: "names no scope",
                                    advice: "name what the page needs, such as status, nfc.read, haptics")
            }
            if let devices = body.devices {
                for device in devices {
                    let parts = device.split(separator: ".", omittingEmptySubsequences: false)
                    guard parts.count == 2, Capability(rawValue: String(parts[0])) != nil,
                          KitConfiguration.problem(withDeviceName: String(parts[1])) == nil else {
                        throw FieldHALError(.invalidArgument, subject: "devices",
                                            detail: "\"\(TerminalText.escaped(device))\" is not a device: write it as capability.name, such as camera.front")
                    }
                }
            }
            let issued = try host.requireWebTokens().issue(origin: origin, allow: scopes, devices: body.devices.map { Array(Set($0)).sorted() })
            return try Self.json(issued, status: .created)
        }
        v1.delete("web/tokens/:id") { _, context in
            let id = context.parameters.get("id") ?? ""
            try host.authoriseTokenManagement(try await context.caller(host), doing: "DELETE /v1/web/tokens/\(TerminalText.escaped(id))")
            guard let gone = try host.requireWebTokens().revoke(id: id) else {
                throw APIProblem(kind: APIProblem.notFound, subject: "token \(TerminalText.escaped(id))", detail: "no such web token",
                                 advice: "fieldhal web token list shows the tokens", status: 404)
            }
            host.tokenRevoked(gone.id)
            return try Self.json(gone)
        }
    }
}

extension APIHost {
    func authoriseTokenManagement(_ caller: Caller, doing what: String) throws {
        if let refusal = authorisation.refusalUnlessTrusted(caller, doing: what) { throw refusal }
    }

    func requireWebTokens() throws -> any APIWebTokenBook {
        guard let book = webTokens else {
            throw FieldHALError(.unavailable, subject: "web tokens", detail: "the daemon has not opened its book of web tokens",
                                advice: "see the daemon's journal (journalctl -u fieldhal) for why")
        }
        return book
    }
}
