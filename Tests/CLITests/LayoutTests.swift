import Foundation
import TestSupport
import Testing

/// README's layout section is a map newcomers follow: every folder it names must exist, and
/// every source, plugin and top-level folder must be on it.
@Suite struct LayoutTests {
    @Test func theREADMEsLayoutNamesWhatIsThereAndAllOfIt() throws {
        let root = CLI.repositoryRoot.path
        let readme = try String(contentsOfFile: root + "/README.md", encoding: .utf8)
        guard let start = readme.range(of: "## Layout, and adding a plugin\n\n```\n"),
              let end = readme.range(of: "```", range: start.upperBound..<readme.endIndex) else {
            Issue.record("README.md has no layout section")
            return
        }
        // The paths a line starts with ("Sources/FieldHAL/", "packaging/ systemd/ …"), and
        // the `Sources/X` each description names in passing.
        var named: Set<String> = []
        for line in readme[start.upperBound..<end.lowerBound].split(separator: "\n") where !line.hasPrefix(" ") {
            for word in line.split(separator: " ") {
                guard word.hasSuffix("/") else { break }
                named.insert(String(word.dropLast()))
            }
        }
        let files = FileManager.default
        for path in named where !path.contains("*") {
            var isDirectory: ObjCBool = false
            #expect(files.fileExists(atPath: root + "/" + path, isDirectory: &isDirectory) && isDirectory.boolValue,
                    "README's layout names \(path)/, which is not in the repository")
        }
        let text = String(readme[start.upperBound..<end.lowerBound])
        for folder in ["Sources", "Plugins"] {
            for entry in try files.contentsOfDirectory(atPath: root + "/" + folder) where !entry.hasPrefix("C") || folder == "Plugins" {
                #expect(text.contains("\(folder)/\(entry)/") || text.contains(" \(entry):") || text.contains("; \(entry)"),
                        "\(folder)/\(entry)/ is missing from README's layout")
            }
        }
    }
}
