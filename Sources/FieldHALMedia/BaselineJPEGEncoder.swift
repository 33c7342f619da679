import FieldHAL

/// A small baseline JPEG encoder (ITU T.81, JFIF, YCbCr 4:4:4, the standard tables of
/// Annex K) for the stills of the fake camera's test pattern and of a replayed camera. Real
/// cameras deliver MJPEG or use libturbojpeg in the V4L2 plugin; these must build on a
/// machine with no libraries.
public struct BaselineJPEGEncoder: Sendable {
    public let quality: Int

    public init(quality: Int) {
        self.quality = min(100, max(1, quality))
    }

    /// Encodes `width`×`height` RGB pixels, `rgb[(y * width + x) * 3 + channel]`.
    public func encode(rgb: [UInt8], width: Int, height: Int) -> [UInt8] {
        precondition(rgb.count == width * height * 3 && width > 0 && height > 0 && width < 65536 && height < 65536)
        let luminanceTable = Self.scaled(Self.luminanceQuantization, quality: quality)
        let chrominanceTable = Self.scaled(Self.chrominanceQuantization, quality: quality)
        var out: [UInt8] = [0xFF, 0xD8]
        out += [0xFF, 0xE0, 0x00, 0x10] + Array("JFIF".utf8) + [0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00]
        out += [0xFF, 0xDB, 0x00, 0x84, 0x00] + Self.zigzag.map { luminanceTable[$0] }
        out += [0x01] + Self.zigzag.map { chrominanceTable[$0] }
        out += [0xFF, 0xC0, 0x00, 0x11, 0x08, UInt8(height >> 8), UInt8(height & 0xFF), UInt8(width >> 8), UInt8(width & 0xFF), 0x03,
                0x01, 0x11, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01]
        for table in [JPEGHuffmanTable.luminanceDC, .luminanceAC, .chrominanceDC, .chrominanceAC] {
            out += [0xFF, 0xC4, UInt8((2 + table.payload.count) >> 8), UInt8((2 + table.payload.count) & 0xFF)]
            out += table.payload
        }
        out += [0xFF, 0xDA, 0x00, 0x0C, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3F, 0x00]

        var bits = BitWriter()
        bits.reserve(width * height / 2)
        var previousDC = [0, 0, 0]
        // Colour conversion once per picture; the blocks then read planes through unsafe
        // buffers (the fake runs in debug builds, where array subscripts dominate).
        let planes = Self.ycbcrPlanes(rgb, width: width, height: height)
        var block = [Double](repeating: 0, count: 64)
        var coefficients = [Int](repeating: 0, count: 64)
        let divisors = Self.divisors(luminanceTable) + Self.divisors(chrominanceTable)
        let luminanceCodes = Self.luminanceCodes, chrominanceCodes = Self.chrominanceCodes
        let pixels = width * height
        planes.withUnsafeBufferPointer { planes in
            divisors.withUnsafeBufferPointer { divisors in
                block.withUnsafeMutableBufferPointer { block in
                    coefficients.withUnsafeMutableBufferPointer { coefficients in
                        for blockY in stride(from: 0, to: height, by: 8) {
                            for blockX in stride(from: 0, to: width, by: 8) {
                                for component in 0..<3 {
                                    for y in 0..<8 {
                                        // Edge blocks repeat the last row and column.
                                        let row = component * pixels + min(blockY + y, height - 1) * width
                                        for x in 0..<8 { block[y * 8 + x] = planes[row + min(blockX + x, width - 1)] }
                                    }
                                    Self.quantizedDCT(block, divisors: UnsafeBufferPointer(rebasing: divisors[(component == 0 ? 0 : 64)...]),
                                                      into: coefficients)
                                    let codes = component == 0 ? luminanceCodes : chrominanceCodes
                                    Self.encodeBlock(coefficients, previousDC: &previousDC[component], dc: codes.0, ac: codes.1, into: &bits)
                                }
                            }
                        }
                    }
                }
            }
        }
        bits.flush()
        out += bits.bytes
        out += [0xFF, 0xD9]
        return out
    }

    // MARK: Transform and entropy coding

    /// The Y, Cb and Cr planes one after another (Y level-shifted by 128), a value per pixel.
    private static func ycbcrPlanes(_ rgb: [UInt8], width: Int, height: Int) -> [Double] {
        let pixels = width * height
        return [Double](unsafeUninitializedCapacity: 3 * pixels) { planes, initialized in
            rgb.withUnsafeBufferPointer { rgb in
                for pixel in 0..<pixels {
                    let r = Double(rgb[pixel * 3]), g = Double(rgb[pixel * 3 + 1]), b = Double(rgb[pixel * 3 + 2])
                    planes[pixel] = 0.299 * r + 0.587 * g + 0.114 * b - 128
                    planes[pixels + pixel] = -0.168736 * r - 0.331264 * g + 0.5 * b
                    planes[2 * pixels + pixel] = 0.5 * r - 0.418688 * g - 0.081312 * b
                }
            }
            initialized = 3 * pixels
        }
    }

    /// The 2-D DCT-II of an 8×8 block (rows, then columns, each by the Arai–Agui–Nakajima
    /// factorisation: 5 multiplications per 8 points), quantized, in zigzag order.
    /// `divisors` fold the factorisation's output scale into the quantizer.
    private static func quantizedDCT(_ block: UnsafeMutableBufferPointer<Double>, divisors: UnsafeBufferPointer<Double>,
                                     into result: UnsafeMutableBufferPointer<Int>) {
        let data = block.baseAddress!
        for row in 0..<8 { transform8(data + row * 8, stride: 1) }
        for column in 0..<8 { transform8(data + column, stride: 8) }
        for index in 0..<64 { result[zigzagPosition[index]] = lround(data[index] * divisors[index]) }
    }

    /// One 8-point AAN DCT in place, on `values[0]`, `values[stride]`, … `values[7 * stride]`.
    private static func transform8(_ values: UnsafeMutablePointer<Double>, stride: Int) {
        let d0 = values[0], d1 = values[stride], d2 = values[2 * stride], d3 = values[3 * stride]
        let d4 = values[4 * stride], d5 = values[5 * stride], d6 = values[6 * stride], d7 = values[7 * stride]
        let sum07 = d0 + d7, difference07 = d0 - d7, sum16 = d1 + d6, difference16 = d1 - d6
        let sum25 = d2 + d5, difference25 = d2 - d5, sum34 = d3 + d4, difference34 = d3 - d4
        // Even part.
        let even0 = sum07 + sum34, even1 = sum07 - sum34, even2 = sum16 + sum25, even3 = sum16 - sum25
        values[0] = even0 + even2
        values[4 * stride] = even0 - even2
        let rotated = (even3 + even1) * 0.707106781186547524
        values[2 * stride] = even1 + rotated
        values[6 * stride] = even1 - rotated
        // Odd part.
        let odd0 = difference34 + difference25, odd1 = difference25 + difference16, odd2 = difference16 + difference07
        let z5 = (odd0 - odd2) * 0.382683432365089772
        let z2 = 0.541196100146196984 * odd0 + z5
        let z4 = 1.306562964876376527 * odd2 + z5
        let z3 = odd1 * 0.707106781186547524
        let z11 = difference07 + z3, z13 = difference07 - z3
        values[5 * stride] = z13 + z2
        values[3 * stride] = z13 - z2
        values[stride] = z11 + z4
        values[7 * stride] = z11 - z4
    }

    /// 1 / (quantizer × the AAN output scale): AAN's coefficient (u, v) comes out
    /// 8·s(u)·s(v) times the orthonormal DCT's, s(0) = 1, s(k) = √2·cos(kπ/16).
    static func divisors(_ table: [UInt8]) -> [Double] {
        let aan = (0..<8).map { $0 == 0 ? 1.0 : 2.0.squareRoot() * cos(Double($0) * .pi / 16) }
        return (0..<64).map { index in 1 / (Double(table[index]) * aan[index / 8] * aan[index % 8] * 8) }
    }

    /// Where each natural-order coefficient goes in zigzag order.
    private static let zigzagPosition: [Int] = {
        var position = [Int](repeating: 0, count: 64)
        for (order, natural) in zigzag.enumerated() { position[natural] = order }
        return position
    }()

    private static func encodeBlock(_ coefficients: UnsafeMutableBufferPointer<Int>, previousDC: inout Int, dc: [HuffmanCode], ac: [HuffmanCode],
                                    into bits: inout BitWriter) {
        let difference = coefficients[0] - previousDC
        previousDC = coefficients[0]
        let dcSize = magnitudeSize(difference)
        bits.write(dc[dcSize])
        bits.write(amplitudeBits(difference, size: dcSize), count: dcSize)
        var run = 0
        for index in 1..<64 {
            let value = coefficients[index]
            if value == 0 { run += 1; continue }
            while run > 15 {
                bits.write(ac[0xF0])
                run -= 16
            }
            let size = magnitudeSize(value)
            bits.write(ac[run << 4 | size])
            bits.write(amplitudeBits(value, size: size), count: size)
            run = 0
        }
        if run > 0 { bits.write(ac[0x00]) }
    }

    private static func magnitudeSize(_ value: Int) -> Int {
        var magnitude = abs(value), size = 0
        while magnitude > 0 { size += 1; magnitude >>= 1 }
        return size
    }

    /// Negative values are sent as their one's complement in `size` bits (T.81 F.1.2.1).
    private static func amplitudeBits(_ value: Int, size: Int) -> Int {
        value >= 0 ? value : value + (1 << size) - 1
    }

    // MARK: Tables (ITU T.81 Annex K)

    static let zigzag: [Int] = [
        0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
        35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
    ]

    static let luminanceQuantization: [Int] = [
        16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
        14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
        49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
    ]

    static let chrominanceQuantization: [Int] = [
        17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99,
        47, 66, 99, 99, 99, 99, 99, 99,
    ] + [Int](repeating: 99, count: 32)

    /// The IJG quality scaling that libjpeg's `-quality` uses.
    static func scaled(_ base: [Int], quality: Int) -> [UInt8] {
        let scale = quality < 50 ? 5000 / quality : 200 - quality * 2
        return base.map { UInt8(min(255, max(1, ($0 * scale + 50) / 100))) }
    }

    /// The standard tables' codes (DC, AC), built once.
    private static let luminanceCodes = (codes(.luminanceDC), codes(.luminanceAC))
    private static let chrominanceCodes = (codes(.chrominanceDC), codes(.chrominanceAC))

    /// Code for each symbol of `table`, built as T.81 Annex C describes.
    static func codes(_ table: JPEGHuffmanTable) -> [HuffmanCode] {
        var codes = [HuffmanCode](repeating: HuffmanCode(bits: 0, length: 0), count: 256)
        var code = 0, index = 0
        for length in 1...16 {
            for _ in 0..<Int(table.counts[length - 1]) {
                codes[Int(table.symbols[index])] = HuffmanCode(bits: code, length: length)
                code += 1
                index += 1
            }
            code <<= 1
        }
        return codes
    }
}

struct HuffmanCode {
    let bits: Int
    let length: Int
}

/// MSB-first bit packing with JPEG's byte stuffing (0xFF is followed by 0x00).
struct BitWriter {
    private(set) var bytes: [UInt8] = []
    private var accumulator = 0
    private var count = 0

    mutating func reserve(_ capacity: Int) { bytes.reserveCapacity(capacity) }

    mutating func write(_ code: HuffmanCode) {
        precondition(code.length > 0, "symbol without a Huffman code")
        write(code.bits, count: code.length)
    }

    mutating func write(_ value: Int, count bitCount: Int) {
        guard bitCount > 0 else { return }
        accumulator = accumulator << bitCount | (value & ((1 << bitCount) - 1))
        count += bitCount
        while count >= 8 {
            let byte = UInt8((accumulator >> (count - 8)) & 0xFF)
            bytes.append(byte)
            if byte == 0xFF { bytes.append(0x00) }
            count -= 8
            accumulator &= (1 << count) - 1
        }
    }

    /// Pads the last byte with one-bits, as T.81 F.1.2.3 requires.
    mutating func flush() {
        if count > 0 { write((1 << (8 - count)) - 1, count: 8 - count) }
    }
}

#if canImport(Glibc)
import Glibc
#endif
