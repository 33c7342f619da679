import FieldHAL
import FieldHALPluginSDK
import FieldHALPlugins
#if canImport(Glibc)
import Glibc
#endif

// `fieldhal-plugin PLUGIN [--name NAME]`: one built-in plugin served over the plugin
// protocol, as `fieldhal plugin serve PLUGIN` runs it. A process of this executable links
// the backends, the SDK and the core on FoundationEssentials, and none of the CLI, the daemon
// or the flows (docs/decisions.md, "A plugin process of its own").
var arguments = Array(CommandLine.arguments.dropFirst())
/// Said only in usage and errors: listing them makes every plugin's descriptor.
var names: String { BuiltinPlugins.names.joined(separator: ", ") }
guard let plugin = arguments.first, !plugin.hasPrefix("-") else {
    if arguments.first == "--help" || arguments.first == "-h" {
        print("""
            usage: fieldhal-plugin PLUGIN [--name NAME]
            Serves the built-in plugin PLUGIN (\(names)) over FieldHAL's plugin protocol on standard
            input and output. `fieldhal plugin serve PLUGIN` runs it; FieldHAL starts that from a
            plugin manifest (`fieldhal plugin manifest PLUGIN`).
            """)
        exit(0)
    }
    PluginProcess.fail("fieldhal-plugin", "which plugin? one of \(names); see --help", status: 64)
}
arguments.removeFirst()
guard let descriptor = BuiltinPlugins.descriptor(named: plugin) else {
    PluginProcess.fail("fieldhal-plugin", "no built-in plugin \(plugin) in this build; the built-in plugins are \(names)", status: 64)
}
// Not `await PluginProcess.main`: an async top level costs the process its unwind tables
// (MainThread.hand(to:) says why).
PluginProcess.run(descriptor, version: FieldHALVersion.current, arguments: arguments, program: "fieldhal-plugin \(plugin)")
