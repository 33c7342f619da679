import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALCommandLine
import FieldHALPlugins
import FieldHALSystem
import Foundation

/// The executable's entry: the command runs in a task and the main thread is parked, not
/// ended by an async `main`'s `dispatch_main` (`MainThread.hand(to:)` says what that costs
/// the daemon: its unwind tables, resident for good).
@main
enum FieldHALEntry {
    static func main() {
        MainThread.hand {
            await FieldHALCommand.main()
            exit(0)
        }
    }
}

struct FieldHALCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fieldhal",
        abstract: "One interface to a Linux field kit's NFC, GPS, camera, microphone, haptics and biometrics.",
        discussion: """
        The configuration file chooses a plugin per capability: --config, else $FIELDHAL_CONFIG, \
        else /etc/fieldhal/fieldhal.toml; with none of these a command fails (78) and says \
        what to do. `--config fake` (or FIELDHAL_CONFIG=fake) runs the built-in fake kit, so \
        every command can be tried with no hardware; `fieldhal demo` uses it unless configured. \
        `--config fake-bench` is the same with two devices of every kind (examples/fake-bench.toml).

        Exit status: 0 success; 1 failure; 64 bad usage; 65 bad data (a tampered, malformed or \
        stale payload, or a plugin's answer that breaks the plugin protocol); 69 capability unavailable or not configured; 75 timed out or no fix \
        (try again); 78 configuration rejected.
        """,
        version: FieldHALVersion.current,
        subcommands: [PluginsCommand.self, PluginCommand.self, DetectCommand.self, StatusCommand.self, DevicesCommand.self, DaemonCommand.self, GPSCommand.self, NFCCommand.self, CameraCommand.self,
                      MicCommand.self, SoundCommand.self, HapticsCommand.self, BioCommand.self, KeysCommand.self,
                      LocationCommand.self, LockCommand.self, AuditCommand.self, RecordCommand.self, VaultCommand.self, TenantCommand.self, SignInCommand.self,
                      SessionCommand.self, SignOutCommand.self, EvidenceCommand.self, AlertsCommand.self, WebCommand.self, RunCommand.self, DemoCommand.self, AfterSignInCommand.self]
    )
}
