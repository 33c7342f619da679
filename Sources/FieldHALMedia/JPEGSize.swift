import FieldHAL
/// A JPEG's size from its frame header (SOFn), without decoding it: for a still that came
/// over the API as bytes.
public enum JPEGSize {
    /// (width, height), or nil when `jpeg` has no frame header before its scan.
    public static func of(_ jpeg: [UInt8]) -> (width: Int, height: Int)? {
        guard jpeg.count > 4, jpeg[0] == 0xFF, jpeg[1] == 0xD8 else { return nil }
        var index = 2
        while index + 4 <= jpeg.count {
            guard jpeg[index] == 0xFF else { return nil }
            let marker = jpeg[index + 1]
            if marker == 0xFF { index += 1; continue }  // fill byte
            let length = Int(jpeg[index + 2]) << 8 | Int(jpeg[index + 3])
            // SOF0–SOF15, except DHT (C4), JPG (C8) and DAC (CC), which share the range.
            if (0xC0...0xCF).contains(marker), ![0xC4, 0xC8, 0xCC].contains(marker) {
                guard index + 9 <= jpeg.count else { return nil }
                let height = Int(jpeg[index + 5]) << 8 | Int(jpeg[index + 6])
                let width = Int(jpeg[index + 7]) << 8 | Int(jpeg[index + 8])
                return (width, height)
            }
            if marker == 0xDA { return nil }  // the scan began: no frame header came
            index += 2 + length
        }
        return nil
    }
}
