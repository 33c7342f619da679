extension StringProtocol {
    /// The text without the white space and line ends around it (what Foundation's
    /// `trimmingCharacters(in: .whitespacesAndNewlines)` gives, without Foundation's
    /// CharacterSet: the core stands on FoundationEssentials, docs/decisions.md).
    public func trimmingSpace() -> String {
        guard let first = firstIndex(where: { !$0.isWhitespace }),
              let last = lastIndex(where: { !$0.isWhitespace }) else { return "" }
        return String(self[first...last])
    }
}

extension BinaryInteger {
    /// The value in hexadecimal, zero-padded to `width` digits: `0x1d6b.hex(width: 4)` is
    /// "1d6b" (`String(format: "%04x")` without Foundation).
    public func hex(width: Int, uppercase: Bool = false) -> String {
        let digits = String(self, radix: 16, uppercase: uppercase)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}
