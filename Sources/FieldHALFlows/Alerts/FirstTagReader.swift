import FieldHAL

/// Several readers as one, for a flow that takes the first tag on any of them: the NFC
/// acknowledgement of an alert on every reader with the `ack` role (a kit with a front and a
/// rear reader, a bench of them). Each reader waits for a tag at once; the first tag read
/// wins and the other waits are cancelled (each reader's wait is cancellable).
public struct FirstTagReader: NFCReader {
    public let readers: [any NFCReader]

    /// `readers` must not be empty.
    public init(_ readers: [any NFCReader]) {
        precondition(!readers.isEmpty, "a FirstTagReader needs a reader")
        self.readers = readers
    }

    /// One reader as itself, several as the first tag on any of them; nil for none.
    public static func of(_ readers: [any NFCReader]) -> (any NFCReader)? {
        readers.count > 1 ? FirstTagReader(readers) : readers.first
    }

    public var deviceName: String { readers.map(\.deviceName).joined(separator: " + ") }

    /// The first tag any reader reads within `timeout`. When none does: the first failure of
    /// a device (a reader unplugged), which says more than the others' timeouts; else the timeout.
    public func readTag(timeout: Duration) async throws -> NFCTag {
        try await firstAnswer(readers.map { reader in { try await reader.readTag(timeout: timeout) } })
    }

    /// Writing is not raced (two readers could each find a tag and write both): the first
    /// reader writes.
    public func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag {
        try await readers[0].write(message, timeout: timeout)
    }

    public func close() async {
        for reader in readers { await reader.close() }
    }
}

/// A reader there is not: each call says why (a kit whose readers all opted out of a role).
public struct NoReader: NFCReader {
    public let reason: String

    public init(reason: String) { self.reason = reason }

    public var deviceName: String { "none" }
    public func readTag(timeout: Duration) async throws -> NFCTag { throw FieldHALError(.notConfigured, subject: "nfc", detail: reason) }
    public func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag { throw FieldHALError(.notConfigured, subject: "nfc", detail: reason) }
    public func close() async {}
}
