/// Text from outside (a server's answer, a tag's record, a plugin's words) made safe to
/// print to a terminal or write to the journal: control characters are shown as `\u001b`
/// rather than sent. Why: an escape sequence in a session id cleared a technician's screen,
/// and a customer reference holding a newline forged a "fieldhal stopped" line in the log.
public enum TerminalText {
    /// `text` with every C0 control (but a newline, when `keepingNewlines`, and a tab), DEL
    /// and C1 control written as `\uXXXX`.
    public static func escaped(_ text: String, keepingNewlines: Bool = false) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0, keepingNewlines) }) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 16)
        for scalar in text.unicodeScalars {
            if needsEscape(scalar, keepingNewlines) {
                let hex = String(scalar.value, radix: 16)
                result += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar, _ keepingNewlines: Bool) -> Bool {
        switch scalar.value {
        case 0x0A: !keepingNewlines
        case 0x09: false
        case 0x00...0x1F, 0x7F...0x9F: true
        default: false
        }
    }
}
