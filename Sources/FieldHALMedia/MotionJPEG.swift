import FieldHAL
/// Motion-JPEG frames as cameras send them, made into JPEG files any decoder opens.
///
/// Most UVC cameras leave the Huffman tables out of each MJPEG frame: the AVI1 convention
/// says a decoder should assume the standard tables of ITU T.81 Annex K.3. ffmpeg and
/// libjpeg-turbo do; browsers, image viewers and many libraries do not, and show nothing.
/// FieldHAL therefore writes those standard tables into a frame that lacks them.
public enum MotionJPEG {
    /// The frame with the standard Huffman tables inserted before its scan, or nil when it
    /// already carries tables (use it as it is). Throws `malformedData` for bytes that are
    /// not a JPEG up to the start of the scan; the frame is never changed in place.
    public static func withStandardHuffmanTables(_ frame: UnsafeRawBufferPointer, subject: String) throws -> [UInt8]? {
        func malformed(_ detail: String) -> FieldHALError {
            FieldHALError(.malformedData, subject: subject, detail: "an MJPEG frame \(detail)",
                          advice: "the camera sent a damaged frame; if it keeps happening, set prefer_mjpeg = false")
        }
        guard frame.count >= 4, frame[0] == 0xFF, frame[1] == 0xD8 else { throw malformed("without a JPEG start marker") }
        var index = 2
        while true {
            guard index + 1 < frame.count else { throw malformed("that ends before its scan") }
            guard frame[index] == 0xFF else { throw malformed("with data where a marker belongs (byte \(index))") }
            let marker = frame[index + 1]
            switch marker {
            case 0xFF:  // fill byte before a marker
                index += 1
                continue
            case 0xC4:  // DHT: the frame has its own tables
                return nil
            case 0xDA:  // SOS: the scan starts here, with no tables before it
                var completed = [UInt8]()
                completed.reserveCapacity(frame.count + standardTablesSegment.count)
                completed.append(contentsOf: frame[0..<index])
                completed.append(contentsOf: standardTablesSegment)
                completed.append(contentsOf: frame[index...])
                return completed
            case 0xD9:
                throw malformed("that ends (EOI) before its scan")
            case 0x01, 0xD0...0xD7:  // markers without a length
                index += 2
            default:
                guard index + 3 < frame.count else { throw malformed("that ends inside a segment header") }
                let length = Int(frame[index + 2]) << 8 | Int(frame[index + 3])
                guard length >= 2 else { throw malformed("with a segment of impossible length \(length)") }
                index += 2 + length
            }
        }
    }

    /// One DHT segment holding the four tables of T.81 Annex K.3.
    static let standardTablesSegment: [UInt8] = {
        let payload = JPEGHuffmanTable.standard.flatMap(\.payload)
        let length = payload.count + 2
        return [0xFF, 0xC4, UInt8(length >> 8), UInt8(length & 0xFF)] + payload
    }()
}
