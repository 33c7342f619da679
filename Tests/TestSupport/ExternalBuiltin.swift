import Foundation

/// A built-in plugin installed as an external one, as docs/plugins.md tells a kit
/// integrator to do it: a plugin directory holding the manifest `fieldhal plugin manifest`
/// prints and an executable that runs `fieldhal plugin serve PLUGIN`. The real-peer tests
/// of a backend run through it to prove that the plugin protocol carries everything the
/// backend says.
public enum ExternalBuiltin {
    /// Writes the directory (under the temporary directory) and returns its manifest's path.
    public static func install(_ plugin: String, as name: String) async throws -> String {
        let directory = NSTemporaryDirectory() + "fieldhal-external-\(plugin)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let manifest = try await CLI.run(["plugin", "manifest", plugin, "--name", name, "--executable", "run"])
        guard manifest.status == 0 else {
            throw CLIError("fieldhal plugin manifest \(plugin) failed (\(manifest.status)): \(manifest.stderr)")
        }
        try Data(manifest.stdout.utf8).write(to: URL(fileURLWithPath: directory + "/plugin.json"))
        let run = directory + "/run"
        let script = "#!/bin/sh\nexec '\(CLI.binary.path)' plugin serve \(plugin) --name \(name)\n"
        try Data(script.utf8).write(to: URL(fileURLWithPath: run))
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: run)
        return directory + "/plugin.json"
    }
}

public struct CLIError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
