import CSodium
import FieldHAL
import Foundation

/// A location as seed 001 shares it: `{"lat":…,"lon":…,"ts":…,"acc":…}` — degrees, Unix
/// seconds, metres.
public struct SharedLocation: Sendable, Equatable, Codable {
    public var lat: Double
    public var lon: Double
    public var ts: Int64
    public var acc: Double

    public init(lat: Double, lon: Double, ts: Int64, acc: Double) {
        self.lat = lat
        self.lon = lon
        self.ts = ts
        self.acc = acc
    }

    /// The fix's position and time; a fix without accuracy is shared as 0 m ("unknown"
    /// is not a value the seed's format has), so callers should prefer fixes that have it.
    public init?(_ fix: Fix) {
        guard fix.hasPosition, let latitude = fix.latitude, let longitude = fix.longitude else { return nil }
        self.init(lat: latitude, lon: longitude, ts: Int64(fix.time.timeIntervalSince1970.rounded(.down)),
                  acc: fix.horizontalAccuracy ?? 0)
    }

    /// The location rounded to `decimals` places (2 ≈ 1.1 km, 3 ≈ 110 m), with the
    /// accuracy widened by the most the rounding can have moved it, so a recipient never
    /// reads a fuzzed position as more precise than it is.
    public func fuzzed(toDecimals decimals: Int) -> SharedLocation {
        let scale = pow(10.0, Double(decimals))
        let roundedLatitude = (lat * scale).rounded() / scale
        let roundedLongitude = (lon * scale).rounded() / scale
        // Half a step in each axis, in metres (a degree of latitude ≈ 111 320 m).
        let halfStep = 0.5 / scale
        let north = halfStep * 111_320
        let east = halfStep * 111_320 * cos(lat * .pi / 180)
        let widened = acc + (north * north + east * east).squareRoot()
        return SharedLocation(lat: roundedLatitude, lon: roundedLongitude, ts: ts, acc: (widened * 10).rounded(.up) / 10)
    }
}

/// Sealed boxes of locations (seed 001 §4.4): `crypto_box_seal` to a recipient's public
/// key, base64 on the wire; only the recipient's private key opens one, and the sender
/// stays anonymous to anyone else.
public enum LocationSeal {
    /// The JSON inside a box is small; a payload far larger than any location is refused
    /// before decoding.
    public static let maximumPayloadCharacters = 4096

    /// Seals `location` for `recipientPublicKey` (32 bytes); returns base64.
    public static func seal(_ location: SharedLocation, for recipientPublicKey: [UInt8]) throws -> String {
        guard recipientPublicKey.count == Int(crypto_box_PUBLICKEYBYTES) else {
            throw FieldHALError(.invalidArgument, subject: "location seal",
                                detail: "a recipient's public key is \(crypto_box_PUBLICKEYBYTES) bytes; this one is \(recipientPublicKey.count)",
                                advice: "pass the base64 that `fieldhal keys show` prints on the recipient's kit")
        }
        try validate(location)
        let plaintext = Array(try JSONEncoder().encode(location))
        var box = [UInt8](repeating: 0, count: plaintext.count + crypto_box_sealbytes())
        guard sodium_init() >= 0, crypto_box_seal(&box, plaintext, UInt64(plaintext.count), recipientPublicKey) == 0 else {
            throw FieldHALError(.invalidArgument, subject: "location seal", detail: "crypto_box_seal refused the recipient's public key")
        }
        return Base64.encode(box)
    }

    /// Parses a recipient's public key given as base64.
    public static func publicKey(fromBase64 text: String) throws -> [UInt8] {
        guard let key = Base64.decode(text), key.count == Int(crypto_box_PUBLICKEYBYTES) else {
            throw FieldHALError(.invalidArgument, subject: "location seal", detail: "not a public key: expected the base64 of \(crypto_box_PUBLICKEYBYTES) bytes",
                                advice: "copy it whole from `fieldhal keys show` on the recipient's kit")
        }
        return key
    }

    /// Opens a base64 payload with the device's keys and checks it: authentic, well-formed,
    /// `ts` no older than `maximumAge` and no later than `now` plus `clockSkew`.
    public static func open(_ payload: String, with keys: DeviceKeyPair, now: Date = Date(),
                            maximumAge: Duration = .seconds(600), clockSkew: Duration = .seconds(60)) throws -> SharedLocation {
        let subject = "location open"
        guard payload.utf8.count <= maximumPayloadCharacters, let box = Base64.decode(payload) else {
            throw FieldHALError(.malformedData, subject: subject, detail: "the payload is not base64 of a sealed box")
        }
        guard box.count > crypto_box_sealbytes() else {
            throw FieldHALError(.malformedData, subject: subject, detail: "the payload is too short to be a sealed box (\(box.count) bytes)")
        }
        var plaintext = [UInt8](repeating: 0, count: box.count - crypto_box_sealbytes())
        let opened = keys.secretKey.withBytes { secret in
            sodium_init() >= 0 && crypto_box_seal_open(&plaintext, box, UInt64(box.count), keys.publicKey, secret) == 0
        }
        guard opened else {
            throw FieldHALError(.malformedData, subject: subject,
                                detail: "the payload does not open with this device's key: it was altered, or sealed for another device")
        }
        let location: SharedLocation
        do {
            location = try JSONDecoder().decode(SharedLocation.self, from: Data(plaintext))
        } catch {
            throw FieldHALError(.malformedData, subject: subject, detail: "the sealed content is not a location {lat, lon, ts, acc}")
        }
        try validate(location)
        let age = now.timeIntervalSince1970 - Double(location.ts)
        if age > maximumAge.seconds {
            throw FieldHALError(.stale, subject: subject, detail: "the location is \(Int(age)) s old; the window is \(maximumAge.secondsDescription)")
        }
        if -age > clockSkew.seconds {
            throw FieldHALError(.stale, subject: subject, detail: "the location is dated \(Int(-age)) s in the future",
                                advice: "check the clocks of both kits (timedatectl)")
        }
        return location
    }

    private static func validate(_ location: SharedLocation) throws {
        guard location.lat.isFinite, (-90...90).contains(location.lat), location.lon.isFinite, (-180...180).contains(location.lon),
              location.acc.isFinite, location.acc >= 0 else {
            throw FieldHALError(.malformedData, subject: "location",
                                detail: "latitude must be within ±90°, longitude within ±180° and accuracy a non-negative number of metres")
        }
    }
}
