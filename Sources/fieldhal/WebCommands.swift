import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
import FieldHALComposition
import Foundation

struct WebCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "web", abstract: "The web door: tokens for a kiosk's pages.",
        discussion: """
        With a [web] section (listen = "127.0.0.1:8480") the daemon serves its API on that \
        loopback port too, for pages in the kit's browser. A page needs a token bound to its \
        origin; the daemon keeps the tokens (hashed) and these commands ask it, as root or a \
        member of the control group. See docs/web.md.
        """,
        subcommands: [Token.self])

    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "token", abstract: "Issue, list and revoke the web door's tokens.",
            subcommands: [Add.self, List.self, Revoke.self], defaultSubcommand: List.self)
    }
}

extension WebCommand.Token {
    struct Add: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "add", abstract: "Issue a token for the pages of one origin; the token is shown once.",
            discussion: """
            Example: fieldhal web token add --origin https://kiosk.example --allow status,nfc.read,haptics
            The page sends it as Authorization: Bearer TOKEN, or as access_token=TOKEN where it \
            cannot set a header (EventSource, <img>). Plain http origins only for localhost.
            """)
        @OptionGroup var global: GlobalOptions
        @Option(help: "The page's origin as the browser sends it (https://kiosk.example).") var origin: String
        @Option(help: "Comma-separated scopes: \(APIScope.allCases.map(\.rawValue).joined(separator: ", ")).") var allow: String
        @Option(name: .customLong("device"), help: "Only this device (camera.front); repeat for several. Default: every device.")
        var devices: [String] = []

        func execute(_ environment: Environment) async throws {
            let request = APIWebTokenRequest(origin: origin, allow: allow.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) },
                                             devices: devices.isEmpty ? nil : devices)
            let issued = try await WebCommand.daemon(environment) { try await $0.issueWebToken(request) }
            try Output.emit(issued, json: global.json) {
                """
                \(issued.token ?? "")
                token \(issued.id) for \(issued.origin): \(issued.allow.joined(separator: ", "))\(issued.devices.map { " on " + $0.joined(separator: ", ") } ?? "")
                (shown once: the daemon keeps only its hash)
                """
            }
        }
    }

    struct List: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "The tokens: id, origin, scopes, devices, when issued.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let tokens = try await WebCommand.daemon(environment) { try await $0.webTokens() }
            try Output.emit(tokens, json: global.json) {
                guard !tokens.isEmpty else { return "no web tokens" }
                return tokens.map { token in
                    "\(token.id)  \(token.origin)  \(token.allow.joined(separator: ","))"
                        + (token.devices.map { "  devices " + $0.joined(separator: ",") } ?? "")
                        + "  issued \(token.issued.formatted(.iso8601))"
                }.joined(separator: "\n")
            }
        }
    }

    struct Revoke: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Revoke a token: refused from the next request on.")
        @OptionGroup var global: GlobalOptions
        @Argument(help: "The token's id (from list).") var id: String

        func execute(_ environment: Environment) async throws {
            let gone = try await WebCommand.daemon(environment) { try await $0.revokeWebToken(id: id) }
            try Output.emit(gone, json: global.json) { "revoked token \(gone.id) for \(gone.origin)" }
        }
    }
}

extension WebCommand {
    /// The daemon keeps the tokens: without one running there is nothing to ask.
    static func daemon<T>(_ environment: Environment, _ body: (FieldHALClient) async throws -> T) async throws -> T {
        guard let answer = try await environment.throughDaemon(body) else {
            throw FieldHALError(.unavailable, subject: environment.apiSocketPath, detail: "no daemon answers here, and the daemon keeps the web door's tokens",
                                advice: "start it (systemctl start fieldhal, or fieldhal run), then try again")
        }
        return answer
    }
}
