import FieldHAL
import Transrify

extension FixRequest {
    /// The flows' request (Req 10.4): a live fix within 5 s, else one cached in the last
    /// 15 minutes. Sign-in, alert polls and NEARBY evidence all ask this way.
    public static let flows = FixRequest(timeout: .seconds(5), maxAge: .seconds(900))
}

extension LocationProvider {
    /// Where the kit is for an API request, or nil: the flows go on without a location.
    public func geolocation(_ request: FixRequest = .flows) async -> Geolocation? {
        guard let reading = try? await currentFix(request),
              let lat = reading.fix.latitude, let lon = reading.fix.longitude else { return nil }
        return Geolocation(lat: lat, lon: lon)
    }
}
