/// The reader side of an NFC Forum Type 2 tag (NTAG21x, MIFARE Ultralight): READ returns
/// 16 bytes (4 pages) from a page, WRITE stores one 4-byte page. Like `Type4NDEFReader`
/// it is synchronous: on real hardware each `transceive` blocks on the device's thread.
public enum Type2NDEFAccess {
    public static let pageSize = 4
    /// The first page of the data area (pages 0–3 hold the UID, lock bytes and the CC).
    public static let firstDataPage = 4

    public typealias Transceive = (_ command: [UInt8]) throws -> [UInt8]

    /// Reads the capability container and then only as much of the data area as its TLVs
    /// need. `nil`: the area holds no NDEF TLV. A TLV that runs past the data area the CC
    /// declares (a corrupt or hostile tag) throws `NDEFError.malformed`.
    public static func readMessage(transceive: Transceive) throws -> NDEFMessage? {
        let header = try read(page: 0, transceive)
        let container = try Type2CapabilityContainer(bytes: Array(header[12..<16]))
        let size = container.dataAreaSize
        var area: [UInt8] = []
        while true {
            do {
                let tlvs = try Type2TLV.parse(area)
                let complete = tlvs.contains { if case .ndefMessage = $0 { true } else { $0 == .terminator } }
                if complete || area.count >= size { return try Type2TLV.ndefMessage(inDataArea: area) }
            } catch NDEFError.truncated(let detail) {
                guard area.count < size else {
                    throw NDEFError.malformed("\(detail): a TLV runs past the \(size)-byte data area")
                }
            }
            let chunk = try read(page: firstDataPage + area.count / pageSize, transceive)
            area += chunk.prefix(size - area.count)
        }
    }

    /// Writes `message` into the data area. The NDEF TLV's first page is written last, so
    /// that a tag torn from the field mid-write reads as empty, never as a half message.
    public static func writeMessage(_ message: NDEFMessage, transceive: Transceive) throws {
        let header = try read(page: 0, transceive)
        let container = try Type2CapabilityContainer(bytes: Array(header[12..<16]))
        guard container.writeAccess == 0 else {
            throw NDEFError.unsupported("the tag is read-only (CC write access 0x\(hexByte(container.writeAccess)))")
        }
        var area = try Type2TLV.encodeDataArea(message)
        guard area.count <= container.dataAreaSize else {
            throw NDEFError.invalidArgument("the message needs \(area.count) bytes; the tag's data area holds \(container.dataAreaSize)")
        }
        area += [UInt8](repeating: 0, count: (pageSize - area.count % pageSize) % pageSize)
        let pages = stride(from: 0, to: area.count, by: pageSize).map { Array(area[$0..<($0 + pageSize)]) }
        try write(page: firstDataPage, [0x03, 0x00, 0xFE, 0x00], transceive)  // an empty NDEF TLV meanwhile
        for (index, page) in pages.enumerated().dropFirst() {
            try write(page: firstDataPage + index, page, transceive)
        }
        try write(page: firstDataPage, pages[0], transceive)
    }

    static func read(page: Int, _ transceive: Transceive) throws -> [UInt8] {
        let reply = try transceive([0x30, UInt8(page)])
        guard reply.count == 16 else { throw NDEFError.truncated("READ of page \(page) returned \(reply.count) bytes, not 16") }
        return reply
    }

    static func write(page: Int, _ bytes: [UInt8], _ transceive: Transceive) throws {
        _ = try transceive([0xA2, UInt8(page)] + bytes)
    }
}
