/// Finds the line on which a key is set in TOML text. The TOML library reports lines
/// for syntax errors only; for a semantic error (unknown key, wrong type) this scan of the
/// source gives the technician the line too. It understands `[table]` headers and
/// `key = value` lines, which is all FieldHAL's configuration uses.
struct TOMLKeyLocator {
    private var lines: [Substring]

    init(source: String) {
        lines = source.split(separator: "\n", omittingEmptySubsequences: false)
    }

    /// The 1-based line of `path` (`["gps", "interval_ms"]`), or of its table when the key
    /// itself is absent; `nil` when neither is found.
    func line(of fullPath: [String]) -> Int? {
        // `track[3]` is found where `track` is set.
        let path = fullPath.map { $0.split(separator: "[").first.map(String.init) ?? $0 }
        guard let section = path.first else { return nil }
        var currentTable: String? = nil
        var tableLine: Int? = nil
        for (index, raw) in lines.enumerated() {
            let text = raw.trimmingWhitespace()
            if text.hasPrefix("[") {
                let name = text.trimmingCharacters(in: "[]").trimmingWhitespace()
                currentTable = String(name)
                if currentTable == section, tableLine == nil { tableLine = index + 1 }
                if path.count == 1, currentTable == section { return index + 1 }
                continue
            }
            guard let equals = text.firstIndex(of: "=") else { continue }
            let key = text[..<equals].trimmingWhitespace().trimmingCharacters(in: "\"'")
            if path.count == 1, currentTable == nil, key == section { return index + 1 }
            if path.count >= 2, currentTable == section, key == path[1] { return index + 1 }
            if path.count >= 2, currentTable == nil, key == "\(section).\(path[1])" { return index + 1 }
        }
        return tableLine
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> Substring {
        var view = Substring(self)
        while let first = view.first, first == " " || first == "\t" || first == "\r" { view.removeFirst() }
        while let last = view.last, last == " " || last == "\t" || last == "\r" { view.removeLast() }
        return view
    }

    func trimmingCharacters(in set: String) -> Substring {
        var view = Substring(self)
        while let first = view.first, set.contains(first) { view.removeFirst() }
        while let last = view.last, set.contains(last) { view.removeLast() }
        return view
    }
}
