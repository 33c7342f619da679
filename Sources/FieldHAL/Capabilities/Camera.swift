import Foundation

/// What a still capture asks for (expo-camera's `takePictureAsync` options, in pixels).
public struct PhotoRequest: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// JPEG quality, 1–100, where the backend encodes (raw formats); MJPEG passes through.
    public var quality: Int
    /// Frames to drop first so auto-exposure settles.
    public var warmUpFrames: Int

    public init(width: Int = 640, height: Int = 480, quality: Int = 85, warmUpFrames: Int = 3) {
        self.width = width
        self.height = height
        self.quality = quality
        self.warmUpFrames = warmUpFrames
    }
}

/// A captured still: a complete JPEG file's bytes.
public struct Photo: Sendable, Equatable {
    public var jpeg: [UInt8]
    public var width: Int
    public var height: Int
    public var capturedAt: Date

    public init(jpeg: [UInt8], width: Int, height: Int, capturedAt: Date) {
        self.jpeg = jpeg
        self.width = width
        self.height = height
        self.capturedAt = capturedAt
    }
}

/// A format a camera offers (V4L2's `VIDIOC_ENUM_FMT` × `ENUM_FRAMESIZES` × `ENUM_FRAMEINTERVALS`).
public struct CameraFormat: Sendable, Equatable, Codable {
    /// The FourCC: `MJPG`, `YUYV`, …
    public var pixelFormat: String
    public var width: Int
    public var height: Int
    public var framesPerSecond: [Double]

    public init(pixelFormat: String, width: Int, height: Int, framesPerSecond: [Double]) {
        self.pixelFormat = pixelFormat
        self.width = width
        self.height = height
        self.framesPerSecond = framesPerSecond
    }
}

public protocol Camera: Device {
    /// The formats, sizes and rates the device offers.
    func formats() async throws -> [CameraFormat]

    /// Captures one still. The backend picks the nearest size the device offers; the
    /// photo reports the size it actually has.
    func captureStill(_ request: PhotoRequest) async throws -> Photo
}
