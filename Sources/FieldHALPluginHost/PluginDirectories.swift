import FieldHAL
import FieldHALPluginProtocol
import Foundation

/// Where external plugins are found, and what is found there.
///
/// Each plugin directory holds plugins as `NAME/plugin.json` (the manifest beside its
/// executable, as a package installs it) or as a drop-in `NAME.json` whose executable is
/// elsewhere. Directories are searched in order and the first plugin of a name wins, so
/// `$FIELDHAL_PLUGIN_PATH` (colon-separated, first) overrides `/etc/fieldhal/plugins.d`
/// (the administrator's), which overrides `/usr/lib/fieldhal/plugins` (packages').
public enum PluginDirectories {
    public static let system = ["/etc/fieldhal/plugins.d", "/usr/lib/fieldhal/plugins"]

    /// The directories searched, in order, for an environment.
    public static func searched(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let extra = environment["FIELDHAL_PLUGIN_PATH"].map { $0.split(separator: ":").map(String.init).filter { !$0.isEmpty } } ?? []
        return extra + system
    }

    /// What the search found.
    public struct Discovery: Sendable {
        /// The plugins to use: valid manifests, first of each name.
        public var plugins: [PluginManifest] = []
        /// Manifests that could not be used, and why (each a `FieldHALError` naming the file).
        public var problems: [FieldHALError] = []
        /// Valid manifests hidden by an earlier plugin of the same name (a built-in one, or
        /// one found earlier in the search), with the file or origin that hides it.
        public var shadowed: [(manifest: PluginManifest, by: String)] = []
    }

    /// Reads every manifest in `directories`. `builtIn` names the plugins compiled in: an
    /// external plugin of the same name is shadowed, never a replacement for one. Never
    /// throws: a broken manifest is a problem in the list, and the others are still used.
    public static func discover(in directories: [String], builtIn: Set<String>) -> Discovery {
        var discovery = Discovery()
        var seen: [String: String] = [:]
        for name in builtIn { seen[name] = "the built-in plugin" }
        for directory in directories {
            for file in manifests(in: directory) {
                do {
                    let manifest = try PluginManifest.load(file)
                    if let earlier = seen[manifest.name] {
                        discovery.shadowed.append((manifest, earlier))
                    } else {
                        seen[manifest.name] = manifest.file
                        discovery.plugins.append(manifest)
                    }
                } catch {
                    discovery.problems.append(error)
                }
            }
        }
        return discovery
    }

    /// The manifest files of one directory, sorted; none when it does not exist.
    static func manifests(in directory: String) -> [String] {
        let manager = FileManager.default
        guard let entries = try? manager.contentsOfDirectory(atPath: directory) else { return [] }
        return entries.sorted().compactMap { entry in
            guard !entry.hasPrefix(".") else { return nil }
            let path = (directory as NSString).appendingPathComponent(entry)
            var isDirectory: ObjCBool = false
            guard manager.fileExists(atPath: path, isDirectory: &isDirectory) else { return nil }
            if isDirectory.boolValue {
                let manifest = (path as NSString).appendingPathComponent("plugin.json")
                return manager.fileExists(atPath: manifest) ? manifest : nil
            }
            return entry.hasSuffix(".json") ? path : nil
        }
    }
}
