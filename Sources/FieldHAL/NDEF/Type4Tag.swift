/// The card side of an NFC Forum Type 4 tag (mapping version 2.0): it answers the
/// ISO 7816-4 APDUs a reader sends to find and read the NDEF file. Tag emulation on a
/// real reader and the fake's scripted reader both run it, so both speak the same protocol.
public struct Type4TagApplication: Sendable {
    public static let ndefApplicationID: [UInt8] = [0xD2, 0x76, 0x00, 0x00, 0x85, 0x01, 0x01]
    public static let capabilityContainerFileID: [UInt8] = [0xE1, 0x03]
    public static let ndefFileID: [UInt8] = [0xE1, 0x04]
    /// The largest response body this tag sends (MLe) and command body it accepts (MLc).
    public static let maxResponseLength = 0x3B
    public static let maxCommandLength = 0x34

    public enum StatusWord {
        public static let ok: [UInt8] = [0x90, 0x00]
        public static let fileNotFound: [UInt8] = [0x6A, 0x82]
        public static let wrongParameters: [UInt8] = [0x6B, 0x00]
        public static let wrongLength: [UInt8] = [0x67, 0x00]
        public static let instructionNotSupported: [UInt8] = [0x6D, 0x00]
        public static let conditionsNotSatisfied: [UInt8] = [0x69, 0x85]
    }

    private enum Selection { case none, application, capabilityContainer, ndefFile }

    private let ndefFile: [UInt8]
    private let capabilityContainer: [UInt8]
    private var selection = Selection.none
    private var highestNDEFByteRead = 0
    public private(set) var commandCount = 0

    public init(message: NDEFMessage) throws {
        let ndef = try message.encoded()
        guard ndef.count <= 0xFFFE - 2 else { throw NDEFError.invalidArgument("message too large for a Type 4 tag") }
        ndefFile = [UInt8(ndef.count >> 8), UInt8(ndef.count & 0xFF)] + ndef
        let maxFile = max(ndefFile.count, 0x80)
        capabilityContainer = [
            0x00, 0x0F,  // CCLEN
            0x20,  // mapping version 2.0
            0x00, UInt8(Self.maxResponseLength),
            0x00, UInt8(Self.maxCommandLength),
            0x04, 0x06,  // NDEF File Control TLV
            Self.ndefFileID[0], Self.ndefFileID[1],
            UInt8(maxFile >> 8), UInt8(maxFile & 0xFF),
            0x00,  // read access: free
            0xFF,  // write access: none
        ]
    }

    /// True once the reader has read every byte of the NDEF file.
    public var messageWasRead: Bool { highestNDEFByteRead >= ndefFile.count }

    /// The response APDU (body and status word) to one command APDU.
    public mutating func respond(to apdu: [UInt8]) -> [UInt8] {
        commandCount += 1
        guard apdu.count >= 4, apdu[0] == 0x00 else { return StatusWord.instructionNotSupported }
        let instruction = apdu[1], p1 = apdu[2], p2 = apdu[3]
        switch instruction {
        case 0xA4:  // SELECT
            guard apdu.count >= 5 else { return StatusWord.wrongLength }
            let length = Int(apdu[4])
            guard apdu.count >= 5 + length else { return StatusWord.wrongLength }
            let data = Array(apdu[5..<(5 + length)])
            if p1 == 0x04 {  // by name
                guard data == Self.ndefApplicationID else { selection = .none; return StatusWord.fileNotFound }
                selection = .application
                return StatusWord.ok
            }
            guard p1 == 0x00, p2 == 0x0C, selection != .none else { return StatusWord.fileNotFound }
            switch data {
            case Self.capabilityContainerFileID: selection = .capabilityContainer
            case Self.ndefFileID: selection = .ndefFile
            default: return StatusWord.fileNotFound
            }
            return StatusWord.ok
        case 0xB0:  // READ BINARY
            let file: [UInt8]
            switch selection {
            case .capabilityContainer: file = capabilityContainer
            case .ndefFile: file = ndefFile
            default: return StatusWord.conditionsNotSatisfied
            }
            let offset = Int(p1 & 0x7F) << 8 | Int(p2)
            var length = apdu.count >= 5 ? Int(apdu[4]) : 256
            if length == 0 { length = 256 }
            guard offset <= file.count else { return StatusWord.wrongParameters }
            let end = min(file.count, offset + min(length, Self.maxResponseLength))
            if selection == .ndefFile { highestNDEFByteRead = max(highestNDEFByteRead, end) }
            return Array(file[offset..<end]) + StatusWord.ok
        case 0xD6:  // UPDATE BINARY: this tag is read-only
            return StatusWord.conditionsNotSatisfied
        default:
            return StatusWord.instructionNotSupported
        }
    }
}

/// The reader side of the Type 4 NDEF procedure: select the application, read the
/// capability container, select and read the NDEF file in chunks of at most MLe bytes.
public enum Type4NDEFReader {
    /// Reads the NDEF message through `transceive`, which sends one command APDU and
    /// returns the response APDU. Any unexpected status word or length throws.
    /// It is synchronous because on real hardware the whole exchange runs on the device's
    /// own thread, where each transceive blocks.
    public static func readMessage(transceive: (_ command: [UInt8]) throws -> [UInt8]) throws -> NDEFMessage {
        func exchange(_ command: [UInt8], _ step: String) throws -> [UInt8] {
            let response = try transceive(command)
            guard response.count >= 2 else { throw NDEFError.truncated("\(step): response of \(response.count) bytes") }
            let status = Array(response.suffix(2))
            guard status == Type4TagApplication.StatusWord.ok else {
                throw NDEFError.malformed("\(step): status \(hexByte(status[0]))\(hexByte(status[1]))")
            }
            return Array(response.dropLast(2))
        }
        let aid = Type4TagApplication.ndefApplicationID
        _ = try exchange([0x00, 0xA4, 0x04, 0x00, UInt8(aid.count)] + aid + [0x00], "select NDEF application")
        _ = try exchange([0x00, 0xA4, 0x00, 0x0C, 0x02] + Type4TagApplication.capabilityContainerFileID, "select CC file")
        let cc = try exchange([0x00, 0xB0, 0x00, 0x00, 0x0F], "read CC file")
        guard cc.count >= 15 else { throw NDEFError.truncated("capability container of \(cc.count) bytes") }
        let maxResponse = max(1, min(Int(cc[3]) << 8 | Int(cc[4]), 0xFF))
        guard cc[7] == 0x04 else { throw NDEFError.malformed("capability container has no NDEF File Control TLV") }
        let fileID = [cc[9], cc[10]]
        let maxFileSize = Int(cc[11]) << 8 | Int(cc[12])
        _ = try exchange([0x00, 0xA4, 0x00, 0x0C, 0x02] + fileID, "select NDEF file")
        let lengthBytes = try exchange([0x00, 0xB0, 0x00, 0x00, 0x02], "read NDEF length")
        guard lengthBytes.count == 2 else { throw NDEFError.truncated("NDEF length field of \(lengthBytes.count) bytes") }
        let length = Int(lengthBytes[0]) << 8 | Int(lengthBytes[1])
        guard length + 2 <= maxFileSize else {
            throw NDEFError.malformed("NDEF length \(length) exceeds the file size \(maxFileSize) in the capability container")
        }
        var ndef: [UInt8] = []
        while ndef.count < length {
            let offset = 2 + ndef.count
            let chunk = min(maxResponse, length - ndef.count)
            let body = try exchange([0x00, 0xB0, UInt8(offset >> 8), UInt8(offset & 0xFF), UInt8(chunk)], "read NDEF at \(offset)")
            guard !body.isEmpty, body.count <= chunk else { throw NDEFError.malformed("READ BINARY returned \(body.count) bytes for \(chunk)") }
            ndef += body
        }
        return length == 0 ? .empty : try NDEFMessage(decoding: ndef)
    }
}
