/// Finds the line on which a key is set in TOML text. The TOML library reports lines
/// for syntax errors only; for a semantic error (unknown key, wrong type) this scan of the
/// source gives the technician the line too. It understands `[table]` headers and
/// `key = value` lines, which is all FieldHAL's configuration uses.
struct TOMLKeyLocator {
    private var lines: [Substring]

    init(source: String) {
        lines = source.split(separator: "\n", omittingEmptySubsequences: false)
    }

    /// The 1-based line of `path` (`["gps", "interval_ms"]`, `["camera", "front", "plugin"]`),
    /// or of the nearest table above it when the key itself is absent; `nil` when neither is
    /// found. Headers may be dotted (`[camera.front]`), and so may keys (`camera.rate = 5`).
    func line(of fullPath: [String]) -> Int? {
        // `track[3]` is found where `track` is set.
        let path = fullPath.map { $0.split(separator: "[").first.map(String.init) ?? $0 }
        guard !path.isEmpty else { return nil }
        var currentTable: [String] = []
        var nearestTable: (depth: Int, line: Int)? = nil
        for (index, raw) in lines.enumerated() {
            let text = raw.trimmingWhitespace()
            if text.hasPrefix("[") {
                currentTable = Self.dotted(text.trimmingCharacters(in: "[]"))
                if currentTable == path { return index + 1 }
                if path.starts(with: currentTable), currentTable.count > (nearestTable?.depth ?? 0) {
                    nearestTable = (currentTable.count, index + 1)
                }
                continue
            }
            guard let equals = text.firstIndex(of: "=") else { continue }
            let key = currentTable + Self.dotted(text[..<equals])
            // A key set to an array or inline table holds what lies below it (`track[3].lat`).
            if path.starts(with: key) { return index + 1 }
        }
        return nearestTable?.line
    }

    /// `camera . "front"` as ["camera", "front"].
    private static func dotted(_ text: some StringProtocol) -> [String] {
        text.split(separator: ".").map { String($0.trimmingWhitespace().trimmingCharacters(in: "\"'")) }
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
