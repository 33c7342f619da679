import FieldHAL
import FieldHALAPI
import Hummingbird
import NIOCore

/// `GET /v1/camera/photo?device=`: a still from a camera the daemon holds (default: the default one), as `image/jpeg`. During
/// a recording on the same camera (the daemon's evidence video) the still is the
/// recording's next frame, at the recording's size: a client sees a photo either way.
/// `GET /v1/camera/formats`: what the camera offers, as `fieldhal camera formats` lists it.
extension APIServer {
    func addCameraRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.get("camera/formats") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.camera, caller, doing: "GET /v1/camera/formats")
            let name = try host.device(.camera, try Self.query(request, taking: ["device"]), scope: .camera, caller, doing: "GET /v1/camera/formats")
            return try Self.json(APICameraFormats(formats: try await host.camera(named: name).formats()))
        }
        v1.get("camera/photo") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.camera, caller, doing: "GET /v1/camera/photo")
            let query = try Self.query(request, taking: ["device", "width", "height", "quality"])
            let photoRequest = try Self.photoRequest(query)
            let device = try host.device(.camera, query, scope: .camera, caller, doing: "GET /v1/camera/photo")
            let camera = try host.camera(named: device)
            let photo = try await host.use(.cameraPhoto, on: device) {
                try await Self.whileConnected(context.channel) { try await camera.captureStill(photoRequest) }
            } answer: { $0.still = DeviceUse.Still(width: $1.width, height: $1.height, bytes: $1.jpeg.count) }
            return Response(status: .ok,
                            headers: [.contentType: "image/jpeg", .cacheControl: "no-store"],
                            body: .init(byteBuffer: ByteBuffer(bytes: photo.jpeg)))
        }
    }

    /// `width` and `height` (16–4096; default 640×480), `quality` (1–100, default 85).
    static func photoRequest(_ query: Parameters) throws -> PhotoRequest {
        func number(_ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
            guard let text = query.get(name) else { return value }
            guard let number = Int(text), range.contains(number) else {
                throw FieldHALError(.invalidArgument, subject: name, detail: "\"\(text)\" is not a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
            return number
        }
        return PhotoRequest(width: try number("width", default: 640, range: 16...4096), height: try number("height", default: 480, range: 16...4096),
                            quality: try number("quality", default: 85, range: 1...100))
    }
}
