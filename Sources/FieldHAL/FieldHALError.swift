/// The one error type that capabilities, plugins and the kit throw.
///
/// It says what failed (`kind`), where (`subject`: a capability and its device, such as
/// `camera /dev/video0`), the underlying detail, and what a technician can do about it.
/// Printed, it reads `camera /dev/video0: permission denied — add the service user to
/// group video or install udev/60-fieldhal.rules`.
public struct FieldHALError: Error, Sendable, Equatable, Codable, CustomStringConvertible {
    public enum Kind: String, Sendable, Codable, CaseIterable {
        /// The configuration names no plugin for this capability.
        case notConfigured
        /// The capability's plugin failed to load; the detail says why.
        case unavailable
        case deviceNotFound
        case permissionDenied
        case busy
        /// The device went away while in use (unplugged, daemon stopped).
        case disconnected
        case timeout
        case cancelled
        /// A location request found no fix of the wanted quality, live or cached.
        case noFix
        /// The device cannot do what was asked (a format, a tag type).
        case unsupported
        /// The caller passed something invalid.
        case invalidArgument
        /// Data from a device, file or peer that does not parse, or fails authentication.
        case malformedData
        /// Well-formed data refused for its time: older than the allowed window, or from
        /// the future (a sealed location's `ts`).
        case stale
        /// An I/O error on a file or device.
        case io
        /// The device or daemon answered in a way its protocol does not allow.
        case protocolError
        /// The caller named a device the kit's configuration does not have (`?device=rear`
        /// on a kit with one camera); the detail lists the names it has.
        case noSuchDevice
    }

    public var kind: Kind
    /// What failed: a capability, optionally with its device (`nfc pn532_uart:/dev/ttyUSB0`).
    public var subject: String
    public var detail: String
    /// What to do about it, when there is something useful to say.
    public var advice: String?

    public init(_ kind: Kind, subject: String, detail: String, advice: String? = nil) {
        self.kind = kind
        self.subject = subject
        self.detail = detail
        self.advice = advice
    }

    public var description: String {
        var text = subject.isEmpty ? detail : "\(subject): \(detail)"
        if let advice { text += " — \(advice)" }
        return text
    }
}

extension FieldHALError {
    /// The error for a wait that ended because its task was cancelled.
    public static func cancelled(_ subject: String) -> FieldHALError {
        FieldHALError(.cancelled, subject: subject, detail: "cancelled")
    }

    /// Whether `error` ends work because it was cancelled (Swift's `CancellationError`, or a
    /// wait woken with `cancelled(_:)`), not because something failed.
    public static func isCancellation(_ error: any Error) -> Bool {
        error is CancellationError || (error as? FieldHALError)?.kind == .cancelled
    }

    /// The error for a wait that ran past its deadline.
    public static func timeout(_ subject: String, after duration: Duration, waitingFor what: String) -> FieldHALError {
        FieldHALError(.timeout, subject: subject, detail: "no \(what) within \(duration.secondsDescription)")
    }
}

extension Duration {
    /// `5 s`, `0.25 s`: how FieldHAL prints a duration in messages.
    public var secondsDescription: String {
        let seconds = Double(components.seconds) + Double(components.attoseconds) / 1e18
        if seconds == seconds.rounded() { return "\(Int(seconds)) s" }
        return "\(seconds) s"
    }

    /// The duration in seconds, as a floating-point number.
    public var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
