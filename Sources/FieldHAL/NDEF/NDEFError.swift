/// Why bytes are not a valid NDEF message, TLV area or Type 4 exchange.
public enum NDEFError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Bytes end before a field they announce.
    case truncated(String)
    /// Structurally invalid: flags, TNF combinations, trailing bytes.
    case malformed(String)
    case malformedText(String)
    case malformedURI(String)
    /// Valid NDEF that FieldHAL deliberately does not accept (chunked records).
    case unsupported(String)
    /// A value the caller asked to encode that NDEF cannot carry.
    case invalidArgument(String)

    public var description: String {
        switch self {
        case .truncated(let detail): "truncated NDEF data: \(detail)"
        case .malformed(let detail): "malformed NDEF data: \(detail)"
        case .malformedText(let detail): "malformed NDEF Text record: \(detail)"
        case .malformedURI(let detail): "malformed NDEF URI record: \(detail)"
        case .unsupported(let detail): "unsupported NDEF data: \(detail)"
        case .invalidArgument(let detail): "cannot encode NDEF: \(detail)"
        }
    }
}
