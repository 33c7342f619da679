import FieldHAL
import FieldHALAPI
import Hummingbird

/// `POST /v1/haptics/play` and `POST /v1/speaker/play`: the kit's feedback, on the devices
/// the daemon holds (its alert banner's buzz and sound use the same ones).
extension APIServer {
    func addFeedbackRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.post("haptics/play") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.haptics, caller, doing: "POST /v1/haptics/play")
            let body = try await APIRequestBody.decode(APIHapticsPlay.self, request, fields: ["pattern"])
            let pattern = try body.named()
            let device = try host.device(.haptics, try Self.query(request, taking: ["device"]), scope: .haptics, caller, doing: "POST /v1/haptics/play")
            let haptics = try host.haptics(named: device)
            let played = try await host.use(.hapticsPlay, on: device, asked: body.pattern) {
                try await Self.whileConnected(context.channel) { try await haptics.play(pattern) }
            } answer: { $0.played = $1 }
            return try Self.json(APIHapticsPlayed(body.pattern, played))
        }
        v1.post("speaker/play") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.speaker, caller, doing: "POST /v1/speaker/play")
            let body = try await APIRequestBody.decode(APISoundPlay.self, request, fields: ["sound"])
            let clip = try body.clip()
            let device = try host.device(.speaker, try Self.query(request, taking: ["device"]), scope: .speaker, caller, doing: "POST /v1/speaker/play")
            let speaker = try host.speaker(named: device)
            try await host.use(.speakerPlay, on: device, asked: clip.name) {
                try await Self.whileConnected(context.channel) { try await speaker.play(clip) }
            }
            return try Self.json(APISoundPlayed(clip))
        }
    }
}
