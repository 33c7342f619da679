import Foundation

/// A built-in plugin installed as an external one, as docs/plugins.md tells a kit
/// integrator to do it: `fieldhal plugin manifest PLUGIN --output DIR` writes the manifest
/// and an executable that runs `fieldhal plugin serve PLUGIN`. The real-peer tests
/// of a backend run through it to prove that the plugin protocol carries everything the
/// backend says.
public enum ExternalBuiltin {
    /// Writes the directory (under the temporary directory) and returns its manifest's path.
    public static func install(_ plugin: String, as name: String) async throws -> String {
        let directory = NSTemporaryDirectory() + "fieldhal-external-\(plugin)-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let installed = try await CLI.run(["plugin", "manifest", plugin, "--name", name, "--output", directory])
        guard installed.status == 0 else {
            throw CLIError("fieldhal plugin manifest \(plugin) --output failed (\(installed.status)): \(installed.stderr)")
        }
        return directory + "/plugin.json"
    }

    /// The processes running from the installation `manifest` names: the host starts a
    /// plugin in its executable's directory, so a process whose working directory is that
    /// one is the plugin's (whatever other tests run of the same plugin elsewhere).
    public static func processes(of manifest: String) -> [Int32] {
        let directory = (manifest as NSString).deletingLastPathComponent
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry -> Int32? in
            guard let pid = Int32(entry),
                  let place = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(entry)/cwd") else { return nil }
            return place == directory ? pid : nil
        }
    }
}

public struct CLIError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
