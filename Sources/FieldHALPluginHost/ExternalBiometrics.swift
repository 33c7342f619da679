import FieldHAL
import FieldHALPluginProtocol

/// A fingerprint sensor in an external plugin: availability, a verification (bounded by
/// its timeout) and an enrollment (unbounded: it waits for the finger), each a request;
/// the enrollment's stages arrive as `$/progress` before its answer. Cancelling the caller
/// cancels the plugin's operation (`$/cancel`), which releases the sensor.
final class ExternalBiometrics: BiometricAuthenticator, ExternalRequestDevice {
    static let capability = Capability.biometrics
    let deviceName: String
    let link: RequestLink.Hold

    init(deviceName: String, link: RequestLink.Hold) {
        self.deviceName = deviceName
        self.link = link
    }

    func availability() async throws -> BiometricAvailability {
        let answer = try await link.call(PluginProtocol.BiometricsMethod.availability, .object([:]), timeout: PluginProtocol.availabilityBound)
        return try PluginProtocol.availability(from: answer, plugin: link.manifest.name)
    }

    func verify(timeout: Duration) async throws -> BiometricResult {
        let answer = try await link.call(PluginProtocol.BiometricsMethod.verify, PluginProtocol.verifyParameters(timeout: timeout),
                                         timeout: timeout)
        return try PluginProtocol.result(from: answer, plugin: link.manifest.name)
    }

    /// A stage the plugin gets wrong ends the enrollment with its `protocolError` (the
    /// plugin is told to stop: the caller's task is what the stages were reported to).
    func enroll(_ finger: Finger, progress: @Sendable (EnrollStage) -> Void) async throws {
        let plugin = link.manifest.name
        let stages = AsyncStream<Result<EnrollStage, FieldHALError>>.makeStream()
        let reported = Task {
            defer { stages.continuation.finish() }  // the answer follows its last stage
            return try await link.call(PluginProtocol.BiometricsMethod.enroll, .object(["finger": .string(finger.rawValue)]),
                                       timeout: PluginProtocol.longestWait) { value in
                do throws(FieldHALError) {
                    stages.continuation.yield(.success(try PluginProtocol.stage(from: value, plugin: plugin)))
                } catch {
                    stages.continuation.yield(.failure(error))
                }
            }
        }
        // The stages come on the session's thread; the caller's closure is called here, on
        // the caller's task, in order (it is not Sendable beyond this call).
        try await withTaskCancellationHandler {
            for await stage in stages.stream {
                switch stage {
                case .success(let stage): progress(stage)
                case .failure(let error):
                    reported.cancel()
                    throw error
                }
            }
            _ = try await reported.value
        } onCancel: {
            reported.cancel()
        }
    }
}
