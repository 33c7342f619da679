import FieldHAL
import FieldHALAPI
import Foundation
import Hummingbird
import NIOCore

/// `GET /v1/biometrics`, `POST /v1/biometrics/verify`, `POST /v1/biometrics/enroll`: the
/// fingerprint sensor the daemon holds. fprintd claims the sensor per operation and releases
/// it after, so two callers simply take turns (a second at once is told `busy`).
extension APIServer {
    func addBiometricsRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.get("biometrics") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.biometrics, caller, doing: "GET /v1/biometrics")
            let device = try host.device(.biometrics, try Self.query(request, taking: ["device"]), scope: .biometrics, caller, doing: "GET /v1/biometrics")
            let sensor = try host.biometrics(named: device)
            return try Self.json(try await host.use(.biometricsAvailability, on: device) {
                try await Self.whileConnected(context.channel) { try await sensor.availability() }
            } answer: { $0.availability = $1 })
        }
        v1.post("biometrics/verify") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.biometrics, caller, doing: "POST /v1/biometrics/verify")
            let body = try await APIRequestBody.decode(APIBiometricVerify.self, request, fields: ["timeoutMs"], empty: APIBiometricVerify())
            let timeout = try APIRequestBody.timeout(body.timeoutMs, default: 10_000)
            let device = try host.device(.biometrics, try Self.query(request, taking: ["device"]), scope: .biometrics, caller, doing: "POST /v1/biometrics/verify")
            let sensor = try host.biometrics(named: device)
            return try Self.json(APIBiometricResult(try await host.use(.biometricsVerify, on: device) {
                try await Self.whileConnected(context.channel) { try await sensor.verify(timeout: timeout) }
            } answer: { $0.setBiometricResult($1) }))
        }
        v1.post("biometrics/enroll") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.biometrics, caller, doing: "POST /v1/biometrics/enroll")
            let body = try await APIRequestBody.decode(APIBiometricEnroll.self, request, fields: ["finger"], empty: APIBiometricEnroll())
            let name = body.finger ?? Finger.rightIndex.rawValue
            guard let finger = Finger(rawValue: name) else {
                throw FieldHALError(.invalidArgument, subject: "finger", detail: "no finger \"\(name)\"",
                                    advice: "the fingers are " + Finger.allCases.map(\.rawValue).joined(separator: ", "))
            }
            let sensor = try host.biometrics(named: try host.device(.biometrics, try Self.query(request, taking: ["device"]), scope: .biometrics, caller,
                                                                    doing: "POST /v1/biometrics/enroll"))
            let channel = context.channel
            // Each stage as the sensor reports it, one JSON line each: a person is touching
            // the sensor and the client shows them how it goes.
            let answer = ResponseBody { writer in
                let (steps, sink) = AsyncStream.makeStream(of: APIEnrollStep.self)
                let enrolling = Task {
                    defer { sink.finish() }
                    do {
                        try await Self.whileConnected(channel) {
                            try await sensor.enroll(finger) { stage in sink.yield(APIEnrollStep(stage)) }
                        }
                    } catch let error as FieldHALError {
                        sink.yield(APIEnrollStep(error: APIProblem(error)))
                    } catch {
                        sink.yield(APIEnrollStep(error: APIProblem(FieldHALError(.io, subject: "biometrics", detail: "\(error)"))))
                    }
                }
                for await step in steps {
                    try await writer.write(ByteBuffer(bytes: try FieldHALAPI.encoder.encode(step) + [0x0A]))
                }
                _ = await enrolling.value
                try await writer.finish(nil)
            }
            return Response(status: .ok, headers: [.contentType: "application/x-ndjson", .cacheControl: "no-store"], body: answer)
        }
    }
}
