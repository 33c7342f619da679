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
        }

        public var who: Who
        public var scopes: Set<APIScope>
        /// The devices the grant is limited to (`camera.front`, `nfc.bench1`), for the
        /// capabilities they name; nil: every device. A kiosk allowed only the front reader.
        public var devices: Set<String>?
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

    /// Whether the peer may do everything.
    public func isTrusted(_ peer: PeerCredentials) -> Bool {
        peer.uid == 0 || peer.uid == serviceUID || controlGroupID.map(peer.isMember(of:)) == true
    }

    /// Everything the peer may do (on some device, where its grants name devices).
    public func scopes(for peer: PeerCredentials) -> Set<APIScope> {
        if isTrusted(peer) { return Set(APIScope.allCases) }
        return grants(of: peer).reduce(into: []) { $0.formUnion($1.scopes) }
    }

    /// The grants that name the peer, by user or by one of its groups.
    private func grants(of peer: PeerCredentials) -> [Grant] {
        grants.filter { grant in
            switch grant.who {
            case .user(let uid, _): uid == peer.uid
            case .group(let gid, _): peer.isMember(of: gid)
            }
        }
    }

    /// Nil when allowed; else the refusal, naming the two ways to change it. With `device`,
    /// a grant limited to other devices of its capability does not allow it.
    public func refusal(_ scope: APIScope, for peer: PeerCredentials, doing what: String, device: DeviceKey? = nil) -> APIProblem? {
        if let device, !isTrusted(peer), scopes(for: peer).contains(scope) {
            if grants(of: peer).contains(where: { $0.scopes.contains(scope) && $0.covers(device) }) { return nil }
            let (who, grantee) = Self.named(peer)
            return APIProblem(
                kind: APIProblem.forbidden, subject: what, detail: "\(who) may use \(scope.rawValue) on other devices, not \(device)",
                advice: "grant it: { \(grantee), allow = [\"\(scope.rawValue)\"], devices = [\"\(device)\"] } in [api] grants of \(configurationFile), then reload the daemon",
                status: 403)
        }
        if scopes(for: peer).contains(scope) { return nil }
        let (who, grantee) = Self.named(peer)
        return APIProblem(
            kind: APIProblem.forbidden, subject: what, detail: "\(who) may not use \(scope.rawValue)",
            advice: "add the user to group \(controlGroupName) for everything, or grant only this: "
                + "{ \(grantee), allow = [\"\(scope.rawValue)\"] } in [api] grants of \(configurationFile), then reload the daemon",
            status: 403)
    }

    /// Whether `peer` may see `use` on an event stream: when it could have made the request
    /// itself (its scopes and grants cover the device).
    public func maySee(_ use: DeviceUse, _ peer: PeerCredentials) -> Bool {
        refusal(use.request.scope, for: peer, doing: "GET /v1/events?types=use", device: DeviceKey(use.request.capability, use.device)) == nil
    }

    /// The refusal for a caller who may use nothing at all, answered at the connection's
    /// gate before any route is looked at (`CallerGate`).
    public func refusalOfEverything(for peer: PeerCredentials, doing what: String = "connection") -> APIProblem {
        let (who, grantee) = Self.named(peer)
        return APIProblem(
            kind: APIProblem.forbidden, subject: what, detail: "\(who) may use nothing on this daemon",
            advice: "add the user to group \(controlGroupName) for everything, or grant what it needs, such as "
                + "{ \(grantee), allow = [\"status\"] } in [api] grants of \(configurationFile), then reload the daemon",
            status: 403)
    }

    /// The caller as a refusal names it ("user kiosk (uid 1001)"), and as a grant would
    /// (`user = "kiosk"`; the uid when the user database has no name).
    private static func named(_ peer: PeerCredentials) -> (who: String, grantee: String) {
        let name = peer.userName
        return (name.map { "user \($0) (uid \(peer.uid))" } ?? "uid \(peer.uid)",
                name.map { "user = \"\($0)\"" } ?? "user = \"\(peer.uid)\"")
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

extension APIAuthorisation.Grant {
    /// Whether the grant reaches `device`: it names no devices, none of `device`'s capability,
    /// or this one.
    func covers(_ device: DeviceKey) -> Bool {
        guard let devices else { return true }
        let prefix = device.capability.rawValue + "."
        return devices.contains(device.description) || !devices.contains { $0.hasPrefix(prefix) }
    }
}
