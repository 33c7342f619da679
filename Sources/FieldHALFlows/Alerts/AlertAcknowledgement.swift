import FieldHAL
import Transrify

/// Req 27 and 31: acknowledging an alert — in the app, or by reading the duressed kit's tag
/// (`trf:duress:<alertId>`) with the kit's NFC reader — then the haptic "success".
public struct AlertAcknowledgement: Sendable {
    /// The API refused or could not be reached: shown, and the alert stays active (Req 27.4).
    /// What the person at the device sees: the reason, and that the alert stays active.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }

    public var client: TransrifyClient
    public var session: SessionRecord
    /// Who says "done" with the haptic "success", if the kit has haptics.
    public var haptics: @Sendable () async -> AfterAuthenticationWork.Lease<(any HapticsEngine)?>

    public init(client: TransrifyClient, session: SessionRecord,
                haptics: @escaping @Sendable () async -> AfterAuthenticationWork.Lease<(any HapticsEngine)?>) {
        self.client = client
        self.session = session
        self.haptics = haptics
    }

    /// Reads the tag within `timeout` and acknowledges its alert with method NFC; `expected`
    /// (when given) must be the tag's alert. Returns the alert's id.
    public func byNFC(reader: any NFCReader, expecting expected: String?, timeout: Duration) async throws -> String {
        let tag = try await reader.readTag(timeout: timeout)
        guard let read = DuressTagPayload.alertId(in: tag.ndef) else {
            throw FieldHALError(.malformedData, subject: "nfc tag \(tag.uidString)", detail: "no trf:duress:<alertId> record on this tag")
        }
        if let expected, expected != read {
            throw FieldHALError(.invalidArgument, subject: "alerts ack --nfc", detail: "the tag is for alert \(read), not \(expected)")
        }
        try await send(alertId: read, method: .nfc)
        return read
    }

    /// `POST /v1/alerts/ack`, then the haptic "success" (Req 27.5).
    public func send(alertId: String, method: AckMethod) async throws {
        do {
            _ = try await client.acknowledge(alertId: alertId, customerRef: session.customerRef, method: method)
        } catch let error as TransrifyError {
            throw Failure(message: "\(error.userMessage) The alert is still active.")
        }
        let lease = await haptics()
        _ = try? await lease.device?.play(.success)
        await lease.release()
    }
}
