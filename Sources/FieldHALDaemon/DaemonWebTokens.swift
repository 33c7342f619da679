import FieldHAL
import FieldHALAPI
import FieldHALServer
import FieldHALSystem
import FieldHALVault

/// The web door's tokens as the API asks for them, kept by the vault's `WebTokenBook` in the
/// state directory.
struct DaemonWebTokens: APIWebTokenBook {
    let book: WebTokenBook

    init(stateDirectory: StateDirectory) throws {
        book = try WebTokenBook(path: stateDirectory.file(WebTokenBook.fileName))
    }

    func tokens() throws -> [APIWebToken] { book.all.map(Self.shown) }

    func issue(origin: String, allow: [APIScope], devices: [String]?) throws -> APIWebToken {
        let (token, text) = try book.issue(origin: origin, allow: allow.map(\.rawValue), devices: devices)
        var shown = Self.shown(token)
        shown.token = text
        return shown
    }

    func revoke(id: String) throws -> APIWebToken? { try book.revoke(id: id).map(Self.shown) }

    func knows(origin: String) -> Bool { book.knows(origin: origin) }

    func grant(presented: String) -> APIAuthorisation.Grant? {
        guard let token = book.token(presented: presented) else { return nil }
        return APIAuthorisation.Grant(who: .token(id: token.id, origin: token.origin),
                                      scopes: Set(token.allow.compactMap(APIScope.init(rawValue:))),
                                      devices: token.devices.map(Set.init))
    }

    private static func shown(_ token: WebToken) -> APIWebToken {
        APIWebToken(id: token.id, origin: token.origin, allow: token.allow, devices: token.devices, issued: token.issued)
    }
}
