/// JSON text (RFC 8259) to and from `JSONValue`, by hand, for the hot paths: the plugin
/// channel's messages and the API's fix events.
///
/// Why not `JSONDecoder`/`JSONEncoder`: a `JSONValue` goes through `Codable` as an enum
/// whose decoder tries each type in turn (a string is tried as a Bool, an Int64 and a Double
/// first, each failure a thrown error) and instantiates generic metadata per container: 0.1–
/// 0.2 ms of CPU for a fix line on each side of the channel on a 2-CPU VM, more than the
/// wake-up that carries it (`fieldhal-bench plugins`). Reading the bytes once, here, costs a
/// few microseconds. The grammar is the RFC's, strictly: `true` is never `1`, nothing may
/// follow the value, strings must be valid UTF-8 without raw control characters, and
/// nesting stops at `maximumDepth`.
extension JSONValue {
    public struct SyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
        /// Where, in bytes from the start of the text.
        public let offset: Int
        public let reason: String
        public var description: String { "invalid JSON at byte \(offset): \(reason)" }
    }

    /// Deeper than any message of the protocol (a fix is 3 levels) and shallow enough for
    /// a thread's stack whatever a plugin sends.
    public static let maximumDepth = 128

    /// One JSON text, surrounded by nothing but whitespace.
    public init(parsing text: some Collection<UInt8>) throws(SyntaxError) {
        let bytes = Array(text)
        var reader = JSONReader(bytes)
        self = try reader.document()
    }

    /// Compact JSON text; an object's keys in sorted order, so that the same value always
    /// gives the same bytes.
    public var jsonText: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        JSONWriter.write(self, into: &out)
        return out
    }
}

private struct JSONReader {
    let bytes: [UInt8]
    var at = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func fail(_ reason: String, at offset: Int? = nil) -> JSONValue.SyntaxError {
        JSONValue.SyntaxError(offset: offset ?? at, reason: reason)
    }

    mutating func document() throws(JSONValue.SyntaxError) -> JSONValue {
        skipSpace()
        let value = try self.value(depth: 0)
        skipSpace()
        guard at == bytes.count else { throw fail("more after the value") }
        return value
    }

    mutating func skipSpace() {
        while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x0A || bytes[at] == 0x0D || bytes[at] == 0x09 { at += 1 }
    }

    mutating func value(depth: Int) throws(JSONValue.SyntaxError) -> JSONValue {
        guard at < bytes.count else { throw fail("the text ends where a value should be") }
        switch bytes[at] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw fail("no value starts with \(Self.show(bytes[at]))")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONValue.SyntaxError) {
        let length = word.utf8CodeUnitCount
        guard at + length <= bytes.count else { throw fail("expected \(word)") }
        let expected = UnsafeBufferPointer(start: word.utf8Start, count: length)
        for index in 0..<length where bytes[at + index] != expected[index] { throw fail("expected \(word)") }
        at += length
    }

    mutating func object(depth: Int) throws(JSONValue.SyntaxError) -> JSONValue {
        guard depth <= JSONValue.maximumDepth else { throw fail("nested deeper than \(JSONValue.maximumDepth)") }
        at += 1  // {
        var members: [String: JSONValue] = [:]
        skipSpace()
        if at < bytes.count, bytes[at] == UInt8(ascii: "}") { at += 1; return .object(members) }
        while true {
            skipSpace()
            guard at < bytes.count, bytes[at] == UInt8(ascii: "\"") else { throw fail("an object's key must be a string") }
            let key = try string()
            skipSpace()
            guard at < bytes.count, bytes[at] == UInt8(ascii: ":") else { throw fail("expected : after an object's key") }
            at += 1
            skipSpace()
            members[key] = try value(depth: depth)  // a repeated key: the last one counts
            skipSpace()
            guard at < bytes.count else { throw fail("the text ends inside an object") }
            if bytes[at] == UInt8(ascii: ",") { at += 1; continue }
            if bytes[at] == UInt8(ascii: "}") { at += 1; return .object(members) }
            throw fail("expected , or } in an object")
        }
    }

    mutating func array(depth: Int) throws(JSONValue.SyntaxError) -> JSONValue {
        guard depth <= JSONValue.maximumDepth else { throw fail("nested deeper than \(JSONValue.maximumDepth)") }
        at += 1  // [
        var items: [JSONValue] = []
        skipSpace()
        if at < bytes.count, bytes[at] == UInt8(ascii: "]") { at += 1; return .array(items) }
        while true {
            skipSpace()
            items.append(try value(depth: depth))
            skipSpace()
            guard at < bytes.count else { throw fail("the text ends inside an array") }
            if bytes[at] == UInt8(ascii: ",") { at += 1; continue }
            if bytes[at] == UInt8(ascii: "]") { at += 1; return .array(items) }
            throw fail("expected , or ] in an array")
        }
    }

    /// A string from its opening quote; escapes decoded, the result checked as UTF-8.
    mutating func string() throws(JSONValue.SyntaxError) -> String {
        let start = at
        at += 1  // "
        var decoded: [UInt8]?  // only once an escape is met
        var runStart = at
        while true {
            guard at < bytes.count else { throw fail("the text ends inside a string", at: start) }
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") { break }
            if byte < 0x20 { throw fail("a raw control character in a string") }
            if byte != UInt8(ascii: "\\") { at += 1; continue }
            if decoded == nil { decoded = [] }
            decoded!.append(contentsOf: bytes[runStart..<at])
            at += 1
            guard at < bytes.count else { throw fail("the text ends inside an escape") }
            let escape = bytes[at]
            at += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded!.append(escape)
            case UInt8(ascii: "b"): decoded!.append(0x08)
            case UInt8(ascii: "f"): decoded!.append(0x0C)
            case UInt8(ascii: "n"): decoded!.append(0x0A)
            case UInt8(ascii: "r"): decoded!.append(0x0D)
            case UInt8(ascii: "t"): decoded!.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800..<0xDC00).contains(scalar) {
                    // A high surrogate must be followed by an escaped low one.
                    guard at + 1 < bytes.count, bytes[at] == UInt8(ascii: "\\"), bytes[at + 1] == UInt8(ascii: "u") else {
                        throw fail("a lone surrogate in a \\u escape")
                    }
                    at += 2
                    let low = try hex4()
                    guard (0xDC00..<0xE000).contains(low) else { throw fail("a lone surrogate in a \\u escape") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00..<0xE000).contains(scalar) {
                    throw fail("a lone surrogate in a \\u escape")
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw fail("an invalid \\u escape") }
                decoded!.append(contentsOf: UTF8.encode(unicode)!)
            default:
                throw fail("an unknown escape \\\(Self.show(escape))", at: at - 2)
            }
            runStart = at
        }
        let end = at
        at += 1  // "
        let text: String?
        if var decoded {
            decoded.append(contentsOf: bytes[runStart..<end])
            text = String(validating: decoded, as: UTF8.self)
        } else {
            text = String(validating: bytes[runStart..<end], as: UTF8.self)
        }
        guard let text else { throw fail("a string that is not valid UTF-8", at: start) }
        return text
    }

    mutating func hex4() throws(JSONValue.SyntaxError) -> UInt32 {
        guard at + 4 <= bytes.count else { throw fail("a \\u escape needs four hex digits") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[at]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw fail("a \\u escape needs four hex digits")
            }
            value = value << 4 | UInt32(digit)
            at += 1
        }
        return value
    }

    /// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?: an integer when it has neither
    /// fraction nor exponent and fits 64 bits, else a finite double.
    mutating func number() throws(JSONValue.SyntaxError) -> JSONValue {
        let start = at
        func digits(_ reader: inout JSONReader) -> Int {
            let from = reader.at
            while reader.at < reader.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(reader.bytes[reader.at]) { reader.at += 1 }
            return reader.at - from
        }
        if bytes[at] == UInt8(ascii: "-") { at += 1 }
        let wholeStart = at
        let whole = digits(&self)
        guard whole > 0 else { throw fail("a number needs a digit", at: start) }
        guard whole == 1 || bytes[wholeStart] != UInt8(ascii: "0") else { throw fail("a number with a leading zero", at: start) }
        var integral = true
        if at < bytes.count, bytes[at] == UInt8(ascii: ".") {
            at += 1
            guard digits(&self) > 0 else { throw fail("a number needs digits after its point", at: start) }
            integral = false
        }
        if at < bytes.count, bytes[at] == UInt8(ascii: "e") || bytes[at] == UInt8(ascii: "E") {
            at += 1
            if at < bytes.count, bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") { at += 1 }
            guard digits(&self) > 0 else { throw fail("a number needs digits in its exponent", at: start) }
            integral = false
        }
        let text = String(decoding: bytes[start..<at], as: UTF8.self)
        if integral, let integer = Int64(text) { return .integer(integer) }
        guard let real = Double(text), real.isFinite else { throw fail("a number out of range", at: start) }
        return .number(real)
    }

    static func show(_ byte: UInt8) -> String {
        (0x21...0x7E).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
    }
}

private enum JSONWriter {
    static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .integer(let number): out.append(contentsOf: String(number).utf8)
        case .number(let number):
            // Non-finite numbers have no JSON spelling (`JSONValue(Double)` never makes one).
            out.append(contentsOf: (number.isFinite ? number.description : "null").utf8)
        case .string(let text): string(text, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                write(item, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                string(key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(members[key]!, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static let hex = Array("0123456789abcdef".utf8)

    static func string(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                        hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
