import FieldHAL
import FieldHALAPI
import Foundation
import Hummingbird
import NIOCore

/// `POST /v1/nfc/read`, `/v1/nfc/write`, `/v1/nfc/emulate`: the kit's NFC chip, taken in turns
/// with every other user of it (`NFCTurns`). A caller that hangs up gives its turn back.
extension APIServer {
    func addNFCRoutes(to v1: RouterGroup<APIRequestContext>) {
        let nfc = v1.group(RouterPath("nfc"))
        nfc.post("read") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.nfcRead, caller, doing: "POST /v1/nfc/read")
            let body = try await APIRequestBody.decode(APINFCRead.self, request, fields: ["timeoutMs"], empty: APINFCRead())
            let timeout = try APIRequestBody.timeout(body.timeoutMs, default: 10_000)
            let named = try Self.deviceName(try Self.query(request, taking: ["device"]))
            let chip = try host.nfc(named: named)
            try host.checkGrant(.nfcReader, named: named, scope: .nfcRead, caller, doing: "POST /v1/nfc/read")
            let label = "a tag read (\(caller.label))"
            let device = (try? host.device(.nfcReader, named: named))?.name ?? named ?? KitConfiguration.defaultDeviceName
            do {
                let tag = try await Self.whileConnected(context.channel) { try await chip.readTag(timeout: timeout, for: label) }
                host.sighted(read: tag, device: device)
                return try Self.json(APITag(tag))
            } catch {
                host.metrics.readFailed(device: device, kind: (error as? FieldHALError)?.kind.rawValue ?? (error is CancellationError ? "cancelled" : "io"))
                throw error
            }
        }
        nfc.post("write") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.nfcWrite, caller, doing: "POST /v1/nfc/write")
            let body = try await APIRequestBody.message(request)
            let message = try body.message()
            let timeout = try APIRequestBody.timeout(body.timeoutMs, default: 10_000)
            let named = try Self.deviceName(try Self.query(request, taking: ["device"]))
            let chip = try host.nfc(named: named)
            try host.checkGrant(.nfcReader, named: named, scope: .nfcWrite, caller, doing: "POST /v1/nfc/write")
            let label = "a tag write (\(caller.label))"
            let device = (try? host.device(.nfcReader, named: named))?.name ?? named ?? KitConfiguration.defaultDeviceName
            let tag = try await host.use(.nfcWrite, on: device) {
                try await Self.whileConnected(context.channel) { try await chip.write(message, timeout: timeout, for: label) }
            } answer: { $0.tag = $1 }
            return try Self.json(APITag(tag))
        }
        nfc.post("emulate") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.nfcEmulate, caller, doing: "POST /v1/nfc/emulate")
            let body = try await APIRequestBody.message(request)
            let message = try body.message()
            let timeout = try APIRequestBody.timeout(body.timeoutMs, default: 30_000)
            let named = try Self.deviceName(try Self.query(request, taking: ["device"]))
            let chip = try host.nfc(named: named)
            try host.checkGrant(.nfcEmulator, named: named, scope: .nfcEmulate, caller, doing: "POST /v1/nfc/emulate")
            let label = "a tag emulation (\(caller.label))"
            let outcome = try await Self.whileConnected(context.channel) {
                try await chip.emulate(message, timeout: timeout, for: label)
            }
            return try Self.json(outcome)
        }
    }

    /// Runs `body` until it ends or the client's connection closes, whichever is first: a
    /// client that hangs up mid-wait cancels its request (Hummingbird would let it run on).
    static func whileConnected<T: Sendable>(_ channel: (any Channel)?, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        let work = Task { try await body() }
        channel?.closeFuture.whenComplete { _ in work.cancel() }
        return try await withTaskCancellationHandler { try await work.value } onCancel: { work.cancel() }
    }
}

extension Caller {
    /// How a caller is named to whoever waits behind it: `uid 1000 alice, pid 4242`, or
    /// `web token 3f2a9c01`.
    var label: String {
        switch self {
        case .peer(let peer): "uid \(peer.uid)" + (peer.userName.map { " \($0)" } ?? "") + ", pid \(peer.pid)"
        case .web(let grant):
            switch grant.who {
            case .token(let id, _): "web token \(id)"
            case .broker: "a command from the MQTT broker"
            case .user, .group: "a web page"
            }
        }
    }
}
