#if Fprintd
import FieldHAL
import FieldHALProcess
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Biometrics through fprintd. Each operation is one run of an fprintd tool: the tool
/// claims the sensor, does one thing, and releases it. When FieldHAL stops a tool early
/// (a timeout, a cancel, a retry result) it kills it, and fprintd releases the sensor of a
/// client that disconnects — so the sensor is never left claimed.
final class FprintdAuthenticator: BiometricAuthenticator {
    struct Settings: Sendable {
        var user = FprintdAuthenticator.currentUser
        var finger: Finger?
        var busAddress: String?
        var toolsDirectory = "/usr/bin"
    }

    let deviceName: String
    /// The sensor as fprintd names it (libfprint's driver name for the model).
    let identity: DeviceIdentity?
    private let settings: Settings
    private var subject: String { "biometrics \(deviceName)" }

    private init(settings: Settings, deviceName: String, sensor: String? = nil) {
        self.settings = settings
        self.deviceName = deviceName
        identity = sensor.map { DeviceIdentity(model: $0, link: "fprintd") }
    }

    /// Checks that fprintd answers and has a sensor before the kit reports it available.
    static func open(_ settings: Settings) async throws -> FprintdAuthenticator {
        for tool in ["fprintd-list", "fprintd-verify", "fprintd-enroll"]
        where !FileManager.default.isExecutableFile(atPath: settings.toolsDirectory + "/" + tool) {
            throw FieldHALError(.unavailable, subject: "biometrics fprintd", detail: "\(settings.toolsDirectory)/\(tool) is missing",
                                advice: "apt install fprintd")
        }
        let probe = FprintdAuthenticator(settings: settings, deviceName: "fprintd")
        let listing = try await probe.list()
        guard let device = listing.device else {
            throw FieldHALError(.deviceNotFound, subject: "biometrics fprintd", detail: "fprintd sees no fingerprint sensor",
                                advice: "plug in a sensor libfprint supports (lsusb; see fprint.freedesktop.org/supported-devices)")
        }
        return FprintdAuthenticator(settings: settings, deviceName: "fprintd \(device)", sensor: device)
    }

    func availability() async throws -> BiometricAvailability {
        let listing = try await list()
        return BiometricAvailability(hasSensor: listing.device != nil, enrolledFingers: listing.fingers)
    }

    func verify(timeout: Duration) async throws -> BiometricResult {
        let arguments = (settings.finger.map { ["-f", $0.rawValue] } ?? []) + [settings.user]
        let result = LockedValue<BiometricResult?>(nil)
        let outcome = try await whileFprintdIsUp {
            try await self.run("fprintd-verify", arguments, timeout: timeout, waitingFor: "finger on the sensor") { stream, line in
                guard stream == .standardOutput, let report = FprintdOutput.result(in: line, prefix: "Verify result: ") else { return .keepReading }
                switch report.name {
                case "verify-match": result.withLock { $0 = .match }
                case "verify-no-match": result.withLock { $0 = .noMatch }
                default:
                    // One scan, one answer: a retry request ends this verification (the tool is
                    // stopped; fprintd releases the sensor) and the caller decides what is next.
                    if let reason = FprintdOutput.retryReason(report.name, prefix: "verify-") { result.withLock { $0 = .retry(reason) } }
                }
                // Without an answer, let the tool finish: what it prints last says why.
                return result.value != nil ? .stop : .keepReading
            }
        }
        if let answer = result.value { return answer }
        throw failure(of: "verify", outcome)
    }

    /// Runs `body` while watching fprintd's bus name: the fprintd tools wait forever for a
    /// daemon that died, so its disappearance ends the wait with `unavailable`.
    private func whileFprintdIsUp<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                let vanished = LockedValue(false)
                _ = try await self.runGdbusMonitor { line in
                    guard line.contains("does not have an owner") else { return .keepReading }
                    vanished.withLock { $0 = true }
                    return .stop
                }
                guard vanished.value else { return nil }  // the monitor itself failed: not a verdict
                throw FieldHALError(.unavailable, subject: self.subject, detail: "fprintd stopped during the operation",
                                    advice: "systemctl status fprintd; it restarts on demand")
            }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                if let value = next { return value }
            }
            throw FieldHALError.cancelled(subject)
        }
    }

    private func runGdbusMonitor(_ onLine: @escaping @Sendable (String) -> ToolProcess.Next) async throws -> ToolProcess.Outcome {
        try await ToolProcess.run("/usr/bin/gdbus", ["monitor", "--system", "--dest", "net.reactivated.Fprint"],
                                  environment: toolEnvironment, subject: subject, timeout: nil) { stream, line in
            stream == .standardOutput ? onLine(line) : .keepReading
        }
    }

    func enroll(_ finger: Finger, progress: @Sendable (EnrollStage) -> Void) async throws {
        // Stages flow from the tool's reader thread through a stream, so `progress` is
        // called here, in the caller's task, as each stage arrives.
        let (stages, sink) = AsyncStream<EnrollStage>.makeStream()
        let completed = LockedValue(false)
        let run = Task {
            defer { sink.finish() }
            let passed = LockedValue(0)
            // Enrolling waits for several touches: give it minutes, not a verify's timeout.
            return try await whileFprintdIsUp {
                try await self.run("fprintd-enroll", ["-f", finger.rawValue, self.settings.user], timeout: .seconds(300),
                                   waitingFor: "enrollment scans") { stream, line in
                    guard stream == .standardOutput, let result = FprintdOutput.result(in: line, prefix: "Enroll result: ") else { return .keepReading }
                    switch result.name {
                    case "enroll-stage-passed":
                        sink.yield(.stagePassed(passed.withLock { $0 += 1; return $0 }))
                    case "enroll-completed":
                        completed.withLock { $0 = true }
                        sink.yield(.completed)
                        return .stop
                    default:
                        if let reason = FprintdOutput.retryReason(result.name, prefix: "enroll-") { sink.yield(.retry(reason)) }
                    }
                    return .keepReading
                }
            }
        }
        try await withTaskCancellationHandler {
            for await stage in stages { progress(stage) }
            let outcome = try await run.value
            if !completed.value { throw failure(of: "enroll", outcome) }
        } onCancel: {
            run.cancel()
        }
    }

    func close() async {}

    // MARK: - Running the tools

    private struct Listing {
        var device: String?
        var fingers: [Finger]
    }

    private func list() async throws -> Listing {
        let outcome = try await run("fprintd-list", [settings.user], timeout: .seconds(10), waitingFor: "fprintd-list")
        var listing = Listing(device: nil, fingers: [])
        for line in outcome.standardOutput {
            if line.hasPrefix("Device at ") { listing.device = listing.device ?? String(line.dropFirst("Device at ".count)) }
            if let hash = line.firstRange(of: ": "), line.hasPrefix(" - #"), let finger = Finger(rawValue: String(line[hash.upperBound...])) {
                listing.fingers.append(finger)
            }
        }
        if outcome.status != 0 && listing.device == nil && !outcome.standardOutput.contains(where: { $0.contains("No devices available") }) {
            throw failure(of: "list", outcome)
        }
        return listing
    }

    private func run(_ tool: String, _ arguments: [String], timeout: Duration, waitingFor what: String,
                     onLine: @escaping @Sendable (ToolProcess.Stream, String) -> ToolProcess.Next = { _, _ in .keepReading }) async throws -> ToolProcess.Outcome {
        try await ToolProcess.run(settings.toolsDirectory + "/" + tool, arguments, environment: toolEnvironment,
                                  subject: subject, timeout: timeout, waitingFor: what, onLine: onLine)
    }

    /// The tools' environment: another system bus when the configuration names one.
    private var toolEnvironment: [String: String] {
        settings.busAddress.map { ["DBUS_SYSTEM_BUS_ADDRESS": $0] } ?? [:]
    }

    /// The typed error for a tool run that ended without an answer, from what it printed:
    /// the first rule whose marker (a D-Bus error name or a tool's message) appears.
    private func failure(of operation: String, _ outcome: ToolProcess.Outcome) -> FieldHALError {
        let text = (outcome.standardOutput + outcome.standardError).joined(separator: "\n")
        let last = outcome.standardError.last(where: { !$0.isEmpty }) ?? outcome.standardOutput.last ?? "no output"
        let rules: [(markers: [String], kind: FieldHALError.Kind, detail: String, advice: String)] = [
            (["removed from the system", "verify-disconnected", "enroll-disconnected"], .disconnected,
             "the sensor was unplugged during \(operation)", "plug it back in; fprintd picks it up again"),
            (["AlreadyInUse", "already claimed"], .busy,
             "another program is using the sensor", "wait for it to finish (fprintd serves one client at a time)"),
            (["NoEnrolledPrints", "No fingers enrolled", "has no fingers enrolled"], .unsupported,
             "\(settings.user) has no enrolled fingerprints", "run fieldhal bio enroll"),
            (["PermissionDenied", "Not Authorized", "not authorized"], .permissionDenied,
             "fprintd refused \(operation) for \(settings.user)",
             "polkit must allow net.reactivated.fprint.device.verify/enroll for the service user"),
            (["ServiceUnknown", "was not provided by any", "Could not connect", "Failed to connect", "NoReply", "Disconnected", "no owner"],
             .unavailable, "fprintd is not answering on the system bus (\(last))",
             "apt install fprintd; it starts on demand through D-Bus activation"),
            (["unknown-error"], .protocolError,
             "fprintd reported an unknown error during \(operation)", "journalctl -u fprintd says more"),
        ]
        if let rule = rules.first(where: { $0.markers.contains(where: text.contains) }) {
            return FieldHALError(rule.kind, subject: subject, detail: rule.detail, advice: rule.advice)
        }
        return FieldHALError(.protocolError, subject: subject,
                             detail: "\(operation) ended without a result (exit \(outcome.status.map(String.init) ?? "none")): \(last)")
    }

    static var currentUser: String {
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { return "root" }
        return String(cString: name)
    }
}

/// Parsing of the fprintd tools' result lines: `Verify result: verify-match (done)`.
enum FprintdOutput {
    static func result(in line: String, prefix: String) -> (name: String, done: Bool)? {
        guard line.hasPrefix(prefix) else { return nil }
        let rest = line.dropFirst(prefix.count)
        let name = rest.split(separator: " ").first.map(String.init) ?? ""
        return (name, rest.hasSuffix("(done)"))
    }

    static func retryReason(_ name: String, prefix: String) -> BiometricRetryReason? {
        guard name.hasPrefix(prefix) else { return nil }
        return BiometricRetryReason(rawValue: String(name.dropFirst(prefix.count)))
    }
}
#endif
