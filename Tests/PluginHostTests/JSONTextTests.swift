import FieldHAL
import FieldHALPluginProtocol
import Foundation
import Testing
import TestSupport

/// The channel's own JSON reader and writer (JSONText.swift) against Foundation's: the same
/// values from the same texts, the same refusals, and what one writes the other reads.
@Suite struct JSONTextTests {
    static let valid: [String] = [
        #"{"jsonrpc":"2.0","method":"gps.fix","params":{"stream":3,"fix":{"mode":"3d","latitude":52.5162746,"longitude":-13.3777,"altitude":-12.25,"time":"2026-11-27T06:00:00.123Z","satellitesUsed":9}}}"#,
        #" [ 1 , -2 , 0 , -0 , 9223372036854775807 , -9223372036854775808 ] "#,
        #"[0.5, -1.25e-7, 6.02E23, 1e2, 2.5E+3, 9223372036854775808, 12345678901234567890123]"#,
        #"{"":"", "a":{"b":{"c":[[],{},[{}]]}}, "t":true, "f":false, "n":null}"#,
        #"["\"\\\/\b\f\n\r\t", "\u0041\u00e9\u4e2d\ud83d\ude00", "é中😀", "\u0000"]"#,
        "\t\r\n\"text\"\n",
        "17",
    ]

    static let invalid: [String] = [
        "", " ", "{", "}", "[", "[1,]", "[,1]", #"{"a":1,}"#, #"{"a" 1}"#, #"{a:1}"#, #"{"a":1 "b":2}"#, "[1 2]",
        "01", "-01", "1.", ".5", "+1", "-", "1e", "1e+", "0x10", "NaN", "Infinity", "-Infinity", "1e999",
        "tru", "nul", "falsey", "True", "1 2", #""abc"#, #""\x""#, #""\u12""#, #""\u12G4""#,
        #""\ud800""#, #""\udc00""#, #""\ud800\u0041""#, "\"a\u{01}b\"", "\"tab\there\"",
        "[" + String(repeating: "[", count: 200) + String(repeating: "]", count: 201),
    ]

    static let foundationForgives: Set<String> = ["[1,]", #"{"a":1,}"#, invalid.last!]

    @Test func readsWhatFoundationReads() throws {
        for text in Self.valid {
            let ours = try JSONValue(parsing: Array(text.utf8))
            let theirs = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            #expect(Self.same(ours, theirs), "\(text): \(ours) against \(theirs)")
        }
        // The strict part: an integer has no point or exponent, and true is never 1.
        #expect(try JSONValue(parsing: Array("[1, 1.0, 1e2, true]".utf8)) == .array([.integer(1), .number(1), .number(100), .bool(true)]))
        #expect(try JSONValue(parsing: Array(#""😀""#.utf8)) == .string("😀"))
        #expect(try JSONValue(parsing: Array(#"{"a":1,"a":2}"#.utf8)) == .object(["a": .integer(2)]))
    }

    @Test func refusesWhatIsNotJSONAndSaysWhere() {
        for text in Self.invalid {
            #expect(throws: JSONValue.SyntaxError.self, "\(text)") { try JSONValue(parsing: Array(text.utf8)) }
            // Foundation's reader forgives a trailing comma and nests deeper; the channel's does not.
            if !Self.foundationForgives.contains(text) {
                #expect(throws: (any Error).self, "Foundation takes \(text)") { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }
            }
        }
        // Bytes that are not UTF-8 inside a string.
        #expect(throws: JSONValue.SyntaxError.self) { try JSONValue(parsing: [0x22, 0xFF, 0xFE, 0x22]) }
        #expect(throws: JSONValue.SyntaxError.self) { try JSONValue(parsing: [0x22, 0xC3, 0x22]) }
        let error = try? #require(throws: JSONValue.SyntaxError.self) { try JSONValue(parsing: Array(#"{"a":[1,2,}"#.utf8)) }
        #expect(error?.offset == 10 && error?.description.contains("byte 10: no value starts with '}'") == true, "\(String(describing: error))")
        // Nesting stops at the bound, however deep the text goes.
        let deep = String(repeating: "[", count: 100_000)
        #expect(throws: JSONValue.SyntaxError.self) { try JSONValue(parsing: Array(deep.utf8)) }
        let deepest = String(repeating: "[", count: JSONValue.maximumDepth) + String(repeating: "]", count: JSONValue.maximumDepth)
        #expect((try? JSONValue(parsing: Array(deepest.utf8))) != nil)
    }

    /// Random values through both writers and both readers: every pair agrees.
    @Test func whatOneWritesTheOtherReads() throws {
        var generator = SplitMix64(state: 20261127)
        for _ in 0..<500 {
            let value = Self.randomValue(depth: 0, &generator)
            let text = value.jsonText
            #expect(try JSONValue(parsing: text) == value, "\(String(decoding: text, as: UTF8.self))")
            let foundation = try JSONDecoder().decode(JSONValue.self, from: Data(text))
            #expect(Self.same(foundation, value), "\(String(decoding: text, as: UTF8.self))")
            let written = try JSONEncoder().encode(value)
            #expect(try JSONValue(parsing: Array(written)) == value, "\(String(decoding: written, as: UTF8.self))")
        }
        // One value, one text: keys sorted, nothing else.
        #expect(String(decoding: JSONValue.object(["b": .integer(1), "a": .array([.null, .string("x\"\n\u{01}")])]).jsonText, as: UTF8.self)
                == #"{"a":[null,"x\"\n\u0001"],"b":1}"#)
    }

    /// Foundation's decoder reads a whole-valued number as an integer (`1.0`, `1e2`); ours
    /// as a double. Elsewhere the two must be equal.
    static func same(_ left: JSONValue, _ right: JSONValue) -> Bool {
        switch (left, right) {
        case (.number(let real), .integer(let whole)), (.integer(let whole), .number(let real)): return Double(whole) == real
        case (.array(let a), .array(let b)): return a.count == b.count && zip(a, b).allSatisfy { same($0, $1) }
        case (.object(let a), .object(let b)): return a.keys.sorted() == b.keys.sorted() && a.allSatisfy { same($0.value, b[$0.key]!) }
        default: return left == right
        }
    }

    static func randomValue(depth: Int, _ generator: inout SplitMix64) -> JSONValue {
        let pick = Int.random(in: depth > 3 ? 0...4 : 0...6, using: &generator)
        switch pick {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &generator))
        case 2: return .integer(Int64.random(in: Int64.min...Int64.max, using: &generator) >> Int64.random(in: 0...62, using: &generator))
        case 3:
            let real = Double.random(in: -1e6...1e6, using: &generator) * pow(10, Double(Int.random(in: -30...30, using: &generator)))
            return .number(real.rounded() == real ? real + 0.5 : real)  // whole-valued doubles are Foundation's integers
        case 4:
            let alphabet: [Character] = ["a", "Z", "0", " ", "\"", "\\", "/", "\n", "\t", "\u{01}", "\u{1F}", "é", "中", "😀", "\u{7F}"]
            return .string(String((0..<Int.random(in: 0...12, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }))
        case 5: return .array((0..<Int.random(in: 0...4, using: &generator)).map { _ in randomValue(depth: depth + 1, &generator) })
        default:
            var members: [String: JSONValue] = [:]
            for index in 0..<Int.random(in: 0...4, using: &generator) { members["k\(index)"] = randomValue(depth: depth + 1, &generator) }
            return .object(members)
        }
    }
}
