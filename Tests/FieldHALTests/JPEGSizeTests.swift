import FieldHAL
import FieldHALMedia
import Testing

/// A still's size read from its frame header, as the CLI does for a JPEG the daemon sent.
struct JPEGSizeTests {
    /// SOI, an APP0 segment, DHT (0xC4, in the SOF range but not a frame header), SOF
    /// `marker` of `width`×`height`, then the scan.
    static func header(_ marker: UInt8 = 0xC0, width: Int, height: Int) -> [UInt8] {
        let app0: [UInt8] = [0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8) + [0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00]
        let dht: [UInt8] = [0xFF, 0xC4, 0x00, 0x04, 0x00, 0x00]
        let sof: [UInt8] = [0xFF, marker, 0x00, 0x0B, 0x08, UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8), UInt8(width & 0xFF),
                            0x01, 0x01, 0x11, 0x00]
        let sos: [UInt8] = [0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00, 0x12, 0x34, 0xFF, 0xD9]
        return [0xFF, 0xD8] + app0 + dht + sof + sos
    }

    @Test(arguments: [(UInt8(0xC0), 320, 240), (0xC2, 4096, 16), (0xC1, 1280, 720)])
    func theFrameHeaderGivesTheSize(_ marker: UInt8, _ width: Int, _ height: Int) {
        let size = JPEGSize.of(Self.header(marker, width: width, height: height))
        #expect(size?.width == width && size?.height == height)
    }

    @Test func notAJPEGOrCutShortHasNoSize() {
        #expect(JPEGSize.of(Array("not a jpeg".utf8)) == nil)
        #expect(JPEGSize.of(Array(Self.header(width: 320, height: 240).prefix(30))) == nil)
        #expect(JPEGSize.of([0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02]) == nil, "a scan before any frame header")
        #expect(JPEGSize.of([]) == nil)
    }
}
