import ALSAPlugin
import EvdevPlugin
import FakePlugin
import FieldHAL
import FprintdPlugin
import GpsdPlugin
import LibnfcPlugin
import ReplayPlugin
import V4L2Plugin

// The real backends' C modules are linked only when their traits are on. Importing them
// here makes `swift build` check that each enabled library's headers are installed.
#if NFC
import CNFC
#endif
#if V4L2
import CV4L2
#endif
#if ALSA
import CALSA
#endif
#if Evdev
import CEvdev
#endif

/// The plugins compiled into this build. This list is the one place that names them: a
/// new backend adds its folder, its target in Package.swift, and a line here.
public enum BuiltinPlugins {
    /// Each plugin under its name, its descriptor made only when asked for (a plugin process
    /// touches only the backend it serves). A real backend's is nil when its trait is off,
    /// so `fieldhal plugins` never claims hardware support the binary lacks.
    private static let plugins: [(name: String, descriptor: @Sendable () -> PluginDescriptor?)] = [
        ("fake", { FakePlugin.descriptor }), ("replay", { ReplayPlugin.descriptor }),
        ("fprintd", { FprintdPlugin.descriptor }), ("gpsd", { GpsdPlugin.descriptor }), ("libnfc", { LibnfcPlugin.descriptor }),
        ("v4l2", { V4L2Plugin.descriptor }), ("alsa", { ALSAPlugin.descriptor }), ("evdev", { EvdevPlugin.descriptor }),
    ]

    public static var registry: PluginRegistry {
        PluginRegistry(plugins.compactMap { $0.descriptor() })
    }

    /// The names of the plugins compiled in (those whose trait is on).
    public static var names: [String] { registry.all.map(\.name).sorted() }

    /// One built-in plugin by name, without making the others' descriptors. Nil for a name
    /// this build does not have.
    public static func descriptor(named name: String) -> PluginDescriptor? {
        plugins.first { $0.name == name }?.descriptor()
    }

    /// The traits this binary was built with, for `fieldhal plugins`.
    public static var enabledTraits: [String] {
        var traits: [String] = []
        #if NFC
        traits.append("NFC")
        #endif
        #if GPS
        traits.append("GPS")
        #endif
        #if V4L2
        traits.append("V4L2")
        #endif
        #if ALSA
        traits.append("ALSA")
        #endif
        #if Fprintd
        traits.append("Fprintd")
        #endif
        #if Evdev
        traits.append("Evdev")
        #endif
        #if Hotplug
        traits.append("Hotplug")  // not a plugin: the daemon following devices through libudev
        #endif
        return traits
    }
}
