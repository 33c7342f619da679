import FieldHAL
import FieldHALAPI
import Hummingbird

/// `GET /v1/devices`: every device the configuration names, with its state; and what every
/// capability route shares: `?device=NAME` (default: the capability's default device), and
/// no query parameter a route does not take (a misspelt `?devcie=rear` would otherwise
/// record on the default camera without a word).
extension APIServer {
    func addDeviceRoutes(to v1: RouterGroup<APIRequestContext>) {
        v1.get("devices") { request, context in
            try host.authorise(.status, try await context.caller(host), doing: "GET /v1/devices")
            _ = try Self.query(request, taking: [])
            return try Self.json(APIDevices(devices: host.devices))
        }
    }

    /// The request's query, refused (400) when it holds a parameter the route does not take.
    static func query(_ request: Request, taking names: Set<String>) throws -> Parameters {
        let query = request.uri.queryParameters
        for (key, _) in query where !names.contains(String(key)) {
            let taken = names.sorted().joined(separator: ", ")
            throw FieldHALError(.invalidArgument, subject: "query", detail: "this route takes no parameter \"\(TerminalText.escaped(String(key)))\"",
                                advice: taken.isEmpty ? "leave the query out" : "it takes: \(taken)")
        }
        return query
    }

    /// The device a request names with `?device=` (nil: the default one), as a name that can
    /// be one (400 otherwise); whether the kit has it is the kit's to say (404).
    static func deviceName(_ query: Parameters) throws -> String? {
        guard let name = query.get("device") else { return nil }
        if let problem = KitConfiguration.problem(withDeviceName: name) {
            throw FieldHALError(.invalidArgument, subject: "device", detail: problem)
        }
        return name
    }
}
