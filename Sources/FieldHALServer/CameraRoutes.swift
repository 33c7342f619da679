import FieldHAL
import FieldHALAPI
import Hummingbird
import NIOCore

/// `GET /v1/camera/photo?device=`: a still from a camera the daemon holds (default: the default one), as `image/jpeg`. During
/// a recording on the same camera (the daemon's evidence video) the still is the
/// recording's next frame, at the recording's size: a client sees a photo either way.
/// `GET /v1/camera/formats`: what the camera offers, as `fieldhal camera formats` lists it.
/// One viewer's frames, read by one request at a time.
final class PreviewViewer: @unchecked Sendable {
    private var iterator: AsyncThrowingStream<Photo, any Error>.AsyncIterator

    init(_ frames: AsyncThrowingStream<Photo, any Error>) { iterator = frames.makeAsyncIterator() }

    func next() async throws -> Photo? { try await iterator.next() }
}

/// `GET /v1/camera/preview`: the camera live as `multipart/x-mixed-replace` Motion-JPEG,
/// which an `<img>` shows with no script; one capture for every viewer of a camera.
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
        v1.get("camera/preview") { request, context in
            let caller = try await context.caller(host)
            try host.authorise(.camera, caller, doing: "GET /v1/camera/preview")
            let query = try Self.query(request, taking: ["device", "width", "height", "fps", "quality"])
            let previewRequest = try Self.previewRequest(query)
            let device = try host.device(.camera, query, scope: .camera, caller, doing: "GET /v1/camera/preview")
            let camera = try host.camera(named: device)
            let watching = host.previews.watch(device, camera: camera, request: previewRequest)
            let viewer = PreviewViewer(watching.frames)
            // The first frame before the answer starts: a camera that cannot give one is the
            // API's error, not a stream that ends at once.
            let first: Photo
            do {
                guard let frame = try await viewer.next() else {
                    throw FieldHALError(.unavailable, subject: "camera \(device)", detail: "the preview ended before its first frame")
                }
                first = frame
            } catch {
                watching.leave()
                throw error
            }
            let body = ResponseBody { writer in
                defer { watching.leave() }
                var frame: Photo? = first
                while let photo = frame {
                    var part = ByteBuffer(string: "--\(Self.previewBoundary)\r\nContent-Type: image/jpeg\r\nContent-Length: \(photo.jpeg.count)\r\n\r\n")
                    part.writeBytes(photo.jpeg)
                    part.writeString("\r\n")
                    try await writer.write(part)
                    frame = try await viewer.next()
                }
                try await writer.finish(nil)
            }
            var response = Response(status: .ok, headers: [.contentType: "multipart/x-mixed-replace; boundary=\(Self.previewBoundary)",
                                                           .cacheControl: "no-store"], body: body)
            response.headers[.init("FieldHAL-Preview")!] = "\(watching.request.width)x\(watching.request.height)@\(watching.request.framesPerSecond)"
            return response
        }
    }

    static let previewBoundary = "fieldhal-frame"

    /// `width` and `height` (16–4096; default 640×480), `fps` (1–30, default 10), `quality`
    /// (1–100, default 70).
    static func previewRequest(_ query: Parameters) throws -> PreviewRequest {
        func number(_ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
            try wholeNumber(query, name, default: value, range: range)
        }
        return PreviewRequest(width: try number("width", default: 640, range: 16...4096), height: try number("height", default: 480, range: 16...4096),
                              framesPerSecond: try number("fps", default: 10, range: 1...30), quality: try number("quality", default: 70, range: 1...100))
    }

    /// `width` and `height` (16–4096; default 640×480), `quality` (1–100, default 85).
    static func photoRequest(_ query: Parameters) throws -> PhotoRequest {
        func number(_ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
            try wholeNumber(query, name, default: value, range: range)
        }
        return PhotoRequest(width: try number("width", default: 640, range: 16...4096), height: try number("height", default: 480, range: 16...4096),
                            quality: try number("quality", default: 85, range: 1...100))
    }
}
