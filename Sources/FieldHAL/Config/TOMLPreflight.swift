/// Text the TOML parser (toml++, inside TOMLKit) must not be given: inputs on which it stops
/// the whole process at an internal assertion instead of reporting an error. Found by
/// `fuzz/run` (the `config` target). A configuration file is outside input — a corrupt one
/// must be a clear error, never a crash of the CLI or of the daemon reloading it.
enum TOMLPreflight {
    /// The most parts a key may have (`[a.b.c]` has 3); FieldHAL's deepest is 2.
    static let maximumKeyParts = 32
    /// The deepest arrays and inline tables may nest; FieldHAL's deepest is 2.
    static let maximumNesting = 32

    /// Refuses text the parser must not be given, as "not valid TOML" with its line.
    static func check(_ text: String, file: String) throws(ConfigError) {
        if let problem = problem(in: text) {
            throw ConfigError(file: file, line: problem.line, message: "not valid TOML: \(problem.message)")
        }
    }

    /// The first such spot, as (line, what), or nil. Strings and comments are skipped, since
    /// their contents are never parsed as values.
    ///
    /// - A table header (`[…]`, `[[…]]`) whose key, or a dotted part of it, starts with
    ///   anything but a bare-key character or a quote (`[/ps]`): toml++ asserts in `parse_key`.
    /// - A local date followed by `T` or `t` and then anything but a digit
    ///   (`1979-05-27T'7:32:00Z`): toml++ 3.x decides "date-time" from a look ahead and then
    ///   asserts that the time starts with a digit (`parse_time`, `is_decimal_digit(*cp)`).
    /// - A `}` where an array expects a value (`a = [}]`, `[1, }]`): `parse_array` hands it
    ///   to `parse_value`, which asserts it is given no value terminator.
    ///
    /// To tell a table header from an array value that starts a line, it follows the arrays
    /// and inline tables it is inside; a header is a `[` at a line's start outside both.
    ///
    /// And bounds toml++ has none of, since it recurses once per level: a header or a dotted
    /// key of more than `maximumKeyParts` parts (a 30,000-part `[a.a.a…]` overflowed its
    /// stack, killing the CLI and, on SIGHUP, the daemon), arrays and inline tables nested
    /// deeper than `maximumNesting`, and text longer than `ConfigFile.limit`.
    static func problem(in text: String) -> (line: Int, message: String)? {
        let bytes = Array(text.utf8)
        guard bytes.count <= ConfigFile.limit else {
            return (1, "the text is \(bytes.count) bytes; a configuration is at most \(ConfigFile.limit / 1024) KiB")
        }
        let start = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0  // a byte order mark is not text
        var index = start, line = 1
        func isDigit(_ at: Int) -> Bool { at < bytes.count && bytes[at] >= 0x30 && bytes[at] <= 0x39 }
        func isBareKey(_ byte: UInt8) -> Bool {
            (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x5F || byte == 0x2D
        }
        /// Only whitespace before `at` on its line: a `[` there opens a header, not an array.
        func atLineStart(_ at: Int) -> Bool {
            var before = at - 1
            while before >= 0 && (bytes[before] == 0x20 || bytes[before] == 0x09) { before -= 1 }
            return before < start || bytes[before] == 0x0A
        }
        func starts(_ token: String, at: Int) -> Bool {
            let token = Array(token.utf8)
            return at + token.count <= bytes.count && Array(bytes[at..<(at + token.count)]) == token
        }
        var open: [UInt8] = []  // the arrays ([) and inline tables ({) the scan is inside
        var expectingValue = false  // just after an array's [ or one of its commas
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case 0x0A:  // newline
                line += 1
                index += 1
            case 0x20, 0x09, 0x0D:  // white space: a value is still expected
                index += 1
            case 0x23:  // # comment: to the end of the line
                while index < bytes.count && bytes[index] != 0x0A { index += 1 }
            case 0x5B where !(open.isEmpty && atLineStart(index)):  // [ opening an array value
                open.append(0x5B)
                if open.count > maximumNesting { return (line, "arrays and inline tables nested deeper than \(maximumNesting)") }
                expectingValue = true
                index += 1
            case 0x5D:  // ]
                if open.last == 0x5B { open.removeLast() }
                expectingValue = false
                index += 1
            case 0x7B:  // {
                open.append(0x7B)
                if open.count > maximumNesting { return (line, "arrays and inline tables nested deeper than \(maximumNesting)") }
                expectingValue = false
                index += 1
            case 0x7D:  // }
                if expectingValue && open.last == 0x5B {
                    return (line, "a } where the array expects a value")
                }
                if open.last == 0x7B { open.removeLast() }
                index += 1
            case 0x2C:  // , in an array: a value comes next
                expectingValue = open.last == 0x5B
                index += 1
            case 0x22, 0x27:  // " or ': a string, basic or literal, one line or three quotes
                expectingValue = false
                let triple = starts(byte == 0x22 ? "\"\"\"" : "'''", at: index)
                index += triple ? 3 : 1
                while index < bytes.count {
                    if bytes[index] == 0x0A {
                        if !triple { break }  // an unterminated one-line string: the parser reports it
                        line += 1
                    }
                    if byte == 0x22 && bytes[index] == 0x5C { index += 2; continue }  // an escape in a basic string
                    if bytes[index] == byte && (!triple || starts(byte == 0x22 ? "\"\"\"" : "'''", at: index)) {
                        index += triple ? 3 : 1
                        break
                    }
                    index += 1
                }
            case 0x5B where atLineStart(index):  // [ or [[ opening a table header
                var at = index + (starts("[[", at: index) ? 2 : 1)
                var parts = 0
                while true {
                    parts += 1
                    if parts > maximumKeyParts { return (line, "a table header of more than \(maximumKeyParts) dotted parts") }
                    while at < bytes.count && (bytes[at] == 0x20 || bytes[at] == 0x09) { at += 1 }
                    guard at < bytes.count, isBareKey(bytes[at]) || bytes[at] == 0x22 || bytes[at] == 0x27 else {
                        let seen = at < bytes.count ? String(decoding: [bytes[at]], as: UTF8.self) : "the end"
                        return (line, "a table header whose key starts with \(seen)")
                    }
                    // Past this part of the key (a quoted part is skipped whole), to a dot or the end.
                    if bytes[at] == 0x22 || bytes[at] == 0x27 {
                        let quote = bytes[at]
                        at += 1
                        while at < bytes.count && bytes[at] != quote && bytes[at] != 0x0A { at += bytes[at] == 0x5C && quote == 0x22 ? 2 : 1 }
                        at += 1
                    } else {
                        while at < bytes.count && isBareKey(bytes[at]) { at += 1 }
                    }
                    while at < bytes.count && (bytes[at] == 0x20 || bytes[at] == 0x09) { at += 1 }
                    guard at < bytes.count, bytes[at] == 0x2E else { break }  // a dot: another part follows
                    at += 1
                }
                index += starts("[[", at: index) ? 2 : 1
            default:
                expectingValue = false
                // A dotted key (`a.b.c = 1`, or in an inline table): its parts counted once, from
                // its first character. A float has one dot; a date none.
                if isBareKey(byte) && (index == start || !(isBareKey(bytes[index - 1]) || bytes[index - 1] == 0x2E)) {
                    var at = index, dots = 0
                    while at < bytes.count && (isBareKey(bytes[at]) || bytes[at] == 0x2E || bytes[at] == 0x20 || bytes[at] == 0x09) {
                        if bytes[at] == 0x2E { dots += 1 }
                        at += 1
                    }
                    if dots >= maximumKeyParts { return (line, "a key of more than \(maximumKeyParts) dotted parts") }
                }
                // YYYY-MM-DD then T or t: the time must begin with a digit.
                if isDigit(index), index + 10 < bytes.count, (index == 0 || !isDigit(index - 1)),
                   isDigit(index + 1), isDigit(index + 2), isDigit(index + 3), bytes[index + 4] == 0x2D,
                   isDigit(index + 5), isDigit(index + 6), bytes[index + 7] == 0x2D, isDigit(index + 8), isDigit(index + 9),
                   bytes[index + 10] == 0x54 || bytes[index + 10] == 0x74, !isDigit(index + 11) {
                    return (line, "a date-time whose time does not start with a digit (\(String(decoding: bytes[index..<min(bytes.count, index + 12)], as: UTF8.self))…)")
                }
                index += 1
            }
        }
        return nil
    }
}
