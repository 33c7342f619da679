import FieldHAL
import FieldHALSystem
#if canImport(Glibc)
import Glibc
#endif

/// The whole `main` of a plugin executable: its arguments, then `PluginServer` on standard
/// input and output, then the exit status.
///
/// ```swift
/// import FieldHALPluginSDK
/// import MyPlugin
/// PluginProcess.run(MyPlugin.descriptor, version: "1.0.0")
/// ```
///
/// `run` is for top-level code with no `await` in it; `main` is the same for a caller already
/// in an async context.
///
/// Arguments: `--name NAME`, the name to answer the handshake with (the manifest's; default
/// the descriptor's own), and `--help`. Exit status (sysexits): 0 after the host's `exit` or
/// the end of the input; 64 for arguments it does not know; 69 when `descriptor` is nil (a
/// backend whose trait was off in this build); 76 when the host sent something that is not
/// the protocol (said on standard error, which the host logs).
public enum PluginProcess {
    /// `main` from a synchronous top level: the plugin is served by a task and the main
    /// thread is parked (`MainThread.hand(to:)`, which says why an async top level costs a
    /// plugin process its unwind tables: about 0.8 MiB).
    public static func run(_ descriptor: PluginDescriptor?, version: String,
                           arguments: [String] = Array(CommandLine.arguments.dropFirst()),
                           program: String = executableName) -> Never {
        MainThread.hand {
            await main(descriptor, version: version, arguments: arguments, program: program)
        }
    }

    /// `program` is how usage and errors name the command (default: the executable's name).
    public static func main(_ descriptor: PluginDescriptor?, version: String,
                            arguments: [String] = Array(CommandLine.arguments.dropFirst()),
                            program: String = executableName) async -> Never {
        var name: String?
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "--help", "-h":
                print("""
                    usage: \(program) [--name NAME]
                    Serves the plugin \(descriptor?.name ?? "(not built)") over FieldHAL's plugin protocol (JSON-RPC lines) on
                    standard input and output. FieldHAL starts it from a plugin manifest; it is not run by hand.
                      --name NAME   the name to answer the handshake with: the manifest's
                    """)
                exit(0)
            case "--name":
                guard let value = rest.popFirst(), !value.isEmpty else { fail(program, "--name needs a value", status: 64) }
                name = value
            default:
                if let value = argument.split(separator: "=", maxSplits: 1).dropFirst().first, argument.hasPrefix("--name=") {
                    name = String(value)
                } else {
                    fail(program, "unknown argument \(argument); see --help", status: 64)
                }
            }
        }
        guard let descriptor else {
            fail(program, "this build has no such backend: its trait was off when it was built", status: 69)
        }
        // libdispatch's timer descriptors are made now, while descriptors are plenty.
        await DispatchTimers.prepare()
        if isatty(0) != 0 {
            StandardError.write("\(program): speaks the plugin protocol (JSON-RPC lines) on this terminal; FieldHAL starts it from a manifest")
        }
        let status = await PluginServer(descriptor, name: name ?? descriptor.name, version: version).serve()
        exit(status == 0 ? 0 : 76)  // EX_PROTOCOL: the host broke the protocol (said on stderr)
    }

    /// The name this process was started by, without its directory.
    public static var executableName: String {
        CommandLine.arguments.first.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? "plugin"
    }

    /// Says `program: message` on standard error and exits with `status` (sysexits).
    public static func fail(_ program: String, _ message: String, status: Int32) -> Never {
        StandardError.write("\(program): \(message)")
        exit(status)
    }
}
