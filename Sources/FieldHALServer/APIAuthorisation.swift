import FieldHAL
import FieldHALAPI
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Who may do what through the API, decided by the caller's peer credentials (as fprintd
/// and GeoClue decide by the caller's identity, never by a token it could have copied).
///
/// Everything: root, the daemon's own user, and members of the control group (`[api]
/// group`, default `fieldhal-control`: a group of its own, not the device group `fieldhal`,
/// so that being allowed to drive the kit does not mean being allowed to open
/// `/dev/video0`). Anyone else: the scopes `[api] grants` gives their user or one of their
/// groups, and nothing without a grant.
public struct APIAuthorisation: Sendable {
    public struct Grant: Sendable, Equatable {
        public enum Who: Sendable, Equatable {
            case user(UInt32, name: String)
            case group(UInt32, name: String)
            /// A web door's token (`WebTokenBook`): its id and the origin it is bound to.
            case token(id: String, origin: String)
            /// Commands on the MQTT broker's command topic (`[mqtt] commands`): whoever the
            /// broker lets publish there, as `place` names the broker.
            case broker(place: String)
        }

        public var who: Who
        public var scopes: Set<APIScope>
        /// The devices the grant is limited to (`camera.front`, `nfc.bench1`), for the
        /// capabilities they name; nil: every device. A kiosk allowed only the front reader.
        public var devices: Set<String>?

        public init(who: Who, scopes: Set<APIScope>, devices: Set<String>?) {
            self.who = who
            self.scopes = scopes
            self.devices = devices
        }
    }

    /// The daemon's own user: it may do everything its own CLI may.
    public var serviceUID: UInt32
    public var controlGroupName: String
    /// Nil when no such group exists on this machine (then only root and the service user
    /// and the grants count).
    public var controlGroupID: UInt32?
    public var grants: [Grant]
    /// Named in refusals: where a technician changes the grants.
    public var configurationFile: String

    public static let defaultControlGroup = "fieldhal-control"

    public init(serviceUID: UInt32 = UInt32(getuid()), controlGroup: String = Self.defaultControlGroup, grants: [Grant] = [],
                configurationFile: String) {
        self.serviceUID = serviceUID
        self.controlGroupName = controlGroup
        self.controlGroupID = Self.groupID(controlGroup)
        self.grants = grants
        self.configurationFile = configurationFile
    }

    /// The `[api]` section's `group` and `grants`; a grant that names an unknown scope, user
    /// or group is a configuration error (`ConfigError`, exit 78) naming the file and key, never a grant quietly dropped.
    /// `configuredDevices`: the configuration's devices (`camera.front`), which a grant's
    /// `devices` must name; nil checks only their form.
    public init(settings: PluginParameters?, configurationFile: String, serviceUID: UInt32 = UInt32(getuid()),
                configuredDevices: Set<String>? = nil) throws {
        self.init(serviceUID: serviceUID, controlGroup: settings?.string("group") ?? Self.defaultControlGroup,
                  configurationFile: configurationFile)
        for (index, record) in (settings?.records("grants") ?? []).enumerated() {
            func refuse(_ message: String) -> ConfigError {
                ConfigError(file: configurationFile, key: "api.grants[\(index)]", message: message)
            }
            let who: Grant.Who
            switch (record.string("user"), record.string("group")) {
            case (let user?, nil):
                guard let uid = Self.userID(user) else {
                    throw refuse("no user \"\(user)\" on this machine: create the user, name another, or remove the grant")
                }
                who = .user(uid, name: user)
            case (nil, let group?):
                guard let gid = Self.groupID(group) else {
                    throw refuse("no group \"\(group)\" on this machine: create the group, name another, or remove the grant")
                }
                who = .group(gid, name: group)
            default:
                throw refuse("a grant names either a user or a group: write { user = \"kiosk\", allow = [\"status\"] } or { group = \"lab\", allow = [...] }")
            }
            var scopes: Set<APIScope> = []
            for name in record.strings("allow") ?? [] {
                guard let scope = APIScope(rawValue: name) else {
                    throw refuse("no scope \"\(name)\"; the scopes are " + APIScope.allCases.map(\.rawValue).joined(separator: ", "))
                }
                scopes.insert(scope)
            }
            var devices: Set<String>?
            if let named = record.strings("devices") {
                devices = []
                for device in named {
                    let parts = device.split(separator: ".", omittingEmptySubsequences: false)
                    guard parts.count == 2, Capability(rawValue: String(parts[0])) != nil,
                          KitConfiguration.problem(withDeviceName: String(parts[1])) == nil else {
                        throw refuse("\"\(TerminalText.escaped(device))\" is not a device: write it as capability.name, such as \"camera.front\" or \"nfc.default\"")
                    }
                    if let configuredDevices, !configuredDevices.contains(device) {
                        throw refuse("no device \(device) in this configuration; its devices: " + configuredDevices.sorted().joined(separator: ", "))
                    }
                    devices!.insert(device)
                }
            }
            grants.append(Grant(who: who, scopes: scopes, devices: devices))
        }
    }

    /// The `[api]` parameters, for the configuration's checks and `fieldhal config`.
    public static let specs: [ParameterSpec] = [
        ParameterSpec("socket", .string, help: "the API's Unix socket (default api.sock in the state directory; /run/fieldhal/api.sock under the shipped unit)"),
        ParameterSpec("group", .string, help: "members may use the whole API (default fieldhal-control)"),
        ParameterSpec("grants", .records([
            ParameterSpec("user", .string, help: "a user name or uid"),
            ParameterSpec("group", .string, help: "a group name or gid"),
            ParameterSpec("allow", .strings, required: true, help: "scopes: " + APIScope.allCases.map(\.rawValue).joined(separator: ", ")),
            ParameterSpec("devices", .strings, help: "only these devices, as capability.name (camera.front); default: every device"),
        ]), help: "what other users and groups may do, e.g. { user = \"kiosk\", allow = [\"status\", \"location\"] }"),
    ]

    /// Whether the caller may do everything: never through the web door.
    public func isTrusted(_ caller: Caller) -> Bool {
        guard case .peer(let peer) = caller else { return false }
        return peer.uid == 0 || peer.uid == serviceUID || controlGroupID.map(peer.isMember(of:)) == true
    }

    /// Everything the caller may do (on some device, where its grants name devices).
    public func scopes(for caller: Caller) -> Set<APIScope> {
        if isTrusted(caller) { return Set(APIScope.allCases) }
        return grants(of: caller).reduce(into: []) { $0.formUnion($1.scopes) }
    }

    /// The grants that name the caller: by user or by one of its groups; a web caller's
    /// token is its one grant.
    private func grants(of caller: Caller) -> [Grant] {
        switch caller {
        case .web(let token): return [token]
        case .peer(let peer):
            return grants.filter { grant in
                switch grant.who {
                case .user(let uid, _): uid == peer.uid
                case .group(let gid, _): peer.isMember(of: gid)
                case .token, .broker: false
                }
            }
        }
    }

    /// Nil when allowed; else the refusal, naming the ways to change it. With `device`,
    /// a grant limited to other devices of its capability does not allow it.
    public func refusal(_ scope: APIScope, for caller: Caller, doing what: String, device: DeviceKey? = nil) -> APIProblem? {
        if let device, !isTrusted(caller), scopes(for: caller).contains(scope) {
            if grants(of: caller).contains(where: { $0.scopes.contains(scope) && $0.covers(device) }) { return nil }
            let (who, grantee) = Self.named(caller)
            return APIProblem(
                kind: APIProblem.forbidden, subject: what, detail: "\(who) may use \(scope.rawValue) on other devices, not \(device)",
                advice: caller.isWeb ? tokenAdvice(caller, scope, device: device)
                    : "grant it: { \(grantee), allow = [\"\(scope.rawValue)\"], devices = [\"\(device)\"] } in [api] grants of \(configurationFile), then reload the daemon",
                status: 403)
        }
        if scopes(for: caller).contains(scope) { return nil }
        let (who, grantee) = Self.named(caller)
        return APIProblem(
            kind: APIProblem.forbidden, subject: what, detail: "\(who) may not use \(scope.rawValue)",
            advice: caller.isWeb ? tokenAdvice(caller, scope, device: nil)
                : "add the user to group \(controlGroupName) for everything, or grant only this: "
                + "{ \(grantee), allow = [\"\(scope.rawValue)\"] } in [api] grants of \(configurationFile), then reload the daemon",
            status: 403)
    }

    /// Whether `caller` may see `use` on an event stream: when it could have made the request
    /// itself (its scopes and grants cover the device).
    public func maySee(_ use: DeviceUse, _ caller: Caller) -> Bool {
        refusal(use.request.scope, for: caller, doing: "GET /v1/events?types=use", device: DeviceKey(use.request.capability, use.device)) == nil
    }

    /// The refusal for a caller who may use nothing at all, answered at the connection's
    /// gate before any route is looked at (`CallerGate`).
    public func refusalOfEverything(for caller: Caller, doing what: String = "connection") -> APIProblem {
        let (who, grantee) = Self.named(caller)
        return APIProblem(
            kind: APIProblem.forbidden, subject: what, detail: "\(who) may use nothing on this daemon",
            advice: caller.isWeb ? "issue a token with the scopes the page needs: fieldhal web token add --origin ORIGIN --allow status,…"
                : "add the user to group \(controlGroupName) for everything, or grant what it needs, such as "
                + "{ \(grantee), allow = [\"status\"] } in [api] grants of \(configurationFile), then reload the daemon",
            status: 403)
    }

    /// The refusal of a route only root, the daemon's user and the control group may use
    /// (the web door's tokens): no grant or token reaches it.
    public func refusalUnlessTrusted(_ caller: Caller, doing what: String) -> APIProblem? {
        if isTrusted(caller) { return nil }
        let (who, _) = Self.named(caller)
        return APIProblem(
            kind: APIProblem.forbidden, subject: what, detail: "\(who) may not manage the web door's tokens",
            advice: caller.isWeb ? "tokens are managed over the daemon's Unix socket, never through the web door"
                : "run it as root, or as a member of group \(controlGroupName)",
            status: 403)
    }

    /// The caller as a refusal names it ("user kiosk (uid 1001)", "token 3f2a9c01 of
    /// https://kiosk.example"), and as a grant would (`user = "kiosk"`; the uid when the user
    /// database has no name).
    private static func named(_ caller: Caller) -> (who: String, grantee: String) {
        switch caller {
        case .web(let grant):
            switch grant.who {
            case .token(let id, let origin): return ("token \(id) of \(origin)", "")
            case .broker(let place): return ("a command from MQTT broker \(place)", "")
            case .user, .group: return ("a web token", "")
            }
        case .peer(let peer):
            let name = peer.userName
            return (name.map { "user \($0) (uid \(peer.uid))" } ?? "uid \(peer.uid)",
                    name.map { "user = \"\($0)\"" } ?? "user = \"\(peer.uid)\"")
        }
    }

    /// How a page gets a scope: a token is never widened; a new one is issued. The broker's
    /// commands get theirs from `[mqtt] commands`.
    private func tokenAdvice(_ caller: Caller, _ scope: APIScope, device: DeviceKey?) -> String {
        if case .web(let grant) = caller, case .broker = grant.who {
            return "allow it on the command topic: add \"\(scope.rawValue)\" to [mqtt] commands in \(configurationFile), then restart the daemon"
        }
        guard case .web(let grant) = caller, case .token(_, let origin) = grant.who else { return "" }
        let scopes = (grant.scopes.map(\.rawValue) + [scope.rawValue]).sorted()
        let devices = device.map { " --device \($0)" } ?? ""
        return "issue the page a token that allows it (fieldhal web token add --origin \(origin) --allow \(Set(scopes).sorted().joined(separator: ","))\(devices)), then revoke this one"
    }

    static func userID(_ text: String) -> UInt32? {
        if let number = UInt32(text) { return number }
        return getpwnam(text).map { UInt32($0.pointee.pw_uid) }
    }

    static func groupID(_ text: String) -> UInt32? {
        if let number = UInt32(text) { return number }
        return getgrnam(text).map { UInt32($0.pointee.gr_gid) }
    }
}

/// Who is calling: a program on the kit, known by the kernel's peer credentials on the Unix
/// socket, or a page through the web door, known by its token (bound to an origin).
public enum Caller: Sendable, Equatable {
    case peer(PeerCredentials)
    /// The token's grant (`who` is `.token`).
    case web(APIAuthorisation.Grant)

    public var isWeb: Bool { if case .web = self { true } else { false } }
}

extension APIAuthorisation {
    public func isTrusted(_ peer: PeerCredentials) -> Bool { isTrusted(.peer(peer)) }
    public func scopes(for peer: PeerCredentials) -> Set<APIScope> { scopes(for: .peer(peer)) }
    public func refusal(_ scope: APIScope, for peer: PeerCredentials, doing what: String, device: DeviceKey? = nil) -> APIProblem? {
        refusal(scope, for: .peer(peer), doing: what, device: device)
    }
    public func maySee(_ use: DeviceUse, _ peer: PeerCredentials) -> Bool { maySee(use, .peer(peer)) }
    public func refusalOfEverything(for peer: PeerCredentials, doing what: String = "connection") -> APIProblem {
        refusalOfEverything(for: .peer(peer), doing: what)
    }
}

extension APIAuthorisation.Grant {
    /// Whether the grant reaches `device`: it names no devices, none of `device`'s capability,
    /// or this one.
    func covers(_ device: DeviceKey) -> Bool {
        guard let devices else { return true }
        let prefix = device.capability.rawValue + "."
        return devices.contains(device.description) || !devices.contains { $0.hasPrefix(prefix) }
    }
}
