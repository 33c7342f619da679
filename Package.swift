// swift-tools-version:6.1
//
// FieldHAL: one Swift API over Linux field-kit hardware.
//
// Every real backend sits behind a package trait, so a board without (say) libnfc builds
// with `--disable-default-traits --traits GPS,V4L2`. With no trait at all the fake kit
// still builds and runs: only libsodium (the vault) is always required.
import PackageDescription

/// The real backends, each a trait that pulls in its C library.
let backendTraits: [(trait: String, cModule: String)] = [
    ("NFC", "CNFC"),
    ("GPS", "CGPS"),
    ("V4L2", "CV4L2"),
    ("ALSA", "CALSA"),
    ("Evdev", "CEvdev"),
    ("Fprintd", ""),  // fprintd is reached over D-Bus by its CLI tools: no C library
]

let strictSwift: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
]

/// What a plugin process links stands on FoundationEssentials, not the whole of Foundation
/// (ICU, CoreFoundation): a Swift plugin process's resident memory (docs/decisions.md,
/// "Foundation's essentials"). A dependency that imports Foundation (TOMLKit) would lend its
/// members to every file silently; with MemberImportVisibility a file sees only the members
/// of what it imports itself, so reaching for one of Foundation's is a compile error here.
let essentialsSwift: [SwiftSetting] = strictSwift + [.enableUpcomingFeature("MemberImportVisibility")]

/// How the processes a kit runs (the daemon and CLI, the front, a plugin process) are linked:
/// no symbol exported, full RELRO. Swift's static-stdlib link exports the executable's own
/// symbols (`-export-dynamic`), which nothing here looks up (no plugin is dlopen'ed), and the
/// loader reads their hash and table at every start: 0.3 MiB of a plugin process, 3.6 MB of
/// the daemon's file. `-z relro -z now`: the GOT read-only once bound, as Debian's hardening
/// asks (gold makes partial RELRO by default). GNU ld's packed relocations (DT_RELR) would
/// save the 1 MB relocation table a plugin's loader reads, but GNU ld then makes no RELRO
/// segment at all (Swift emits writable `.rodata`), and lld lays the binary out larger:
/// docs/decisions.md, "How the kit's executables are linked and started".
let kitProcessLinking: [LinkerSetting] = [
    .unsafeFlags(["-Xlinker", "--no-export-dynamic", "-Xlinker", "-z", "-Xlinker", "relro", "-Xlinker", "-z", "-Xlinker", "now"],
                 .when(platforms: [.linux])),
]

let package = Package(
    name: "FieldHAL",
    platforms: [.macOS(.v15)],
    products: [
        // Installed as `fieldhal`: answers the commands a running daemon serves, and hands
        // every other command to the whole CLI (installed as libexec/fieldhal/fieldhal).
        .executable(name: "fieldhal-front", targets: ["fieldhal-front"]),
        .executable(name: "fieldhal", targets: ["fieldhal"]),
        .executable(name: "fieldhal-labserver", targets: ["fieldhal-labserver"]),
        // The benchmarks (docs/performance.md): built and run from the repository, not installed.
        .executable(name: "fieldhal-bench", targets: ["fieldhal-bench"]),
        .library(name: "FieldHAL", targets: ["FieldHAL"]),
        // The built-in plugins' registry (each backend behind its trait), and the product's flows.
        .library(name: "FieldHALPlugins", targets: ["FieldHALPlugins"]),
        .library(name: "FieldHALFlows", targets: ["FieldHALFlows"]),
        // The hardware API's values (for clients in Swift) and its server (for the daemon).
        .library(name: "FieldHALAPI", targets: ["FieldHALAPI"]),
        .library(name: "FieldHALServer", targets: ["FieldHALServer"]),
        .library(name: "FieldHALClient", targets: ["FieldHALClient"]),
        // A plugin executable in Swift: serves any PluginDescriptor over the plugin protocol.
        .library(name: "FieldHALPluginSDK", targets: ["FieldHALPluginSDK"]),
    ],
    traits: [
        .trait(name: "NFC", description: "NFC reader and tag emulation through libnfc (libnfc-dev)"),
        .trait(name: "GPS", description: "Location through gpsd's libgps (libgps-dev)"),
        .trait(name: "V4L2", description: "Cameras through V4L2 and libv4l2 (libv4l-dev)"),
        .trait(name: "ALSA", description: "Microphones and alert sounds through ALSA (libasound2-dev)"),
        .trait(name: "Fprintd", description: "Fingerprint sensors through fprintd on the system D-Bus"),
        .trait(name: "Evdev", description: "Haptics through evdev force feedback (kernel headers only)"),
        .trait(name: "Hotplug", description: "Following devices as they come and go through libudev (libudev-dev)"),
        .default(enabledTraits: ["NFC", "GPS", "V4L2", "ALSA", "Fprintd", "Evdev", "Hotplug"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        // The lab server only: an HTTP server on SwiftNIO, and SQLite for its state.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        // The metrics' text format, for fleets' Prometheus (issue 46): three small files on
        // swift-metrics and swift-atomics, already in the graph.
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // Real-time alerts (Req 35): the lab server's WebSocket channel, and the kit's client
        // (on SwiftNIO, which Hummingbird already builds; NIOSSL gives it wss://).
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // Already built for Hummingbird: its HTTP pipeline's part types, for the API's caller gate.
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        // The kit's HTTPS client to the Transrify API and evidence storage (on the NIO and
        // NIOSSL above): bodies streamed with backpressure, so an answer's size limit holds as
        // it arrives and evidence is uploaded as it is decrypted; redirects left to us.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // SHA-256 of evidence at hardware speed (BoringSSL's SHA-NI/AVX2 code); libsodium's is portable C.
        // The daemon: graceful shutdown on signals, and logging (both already built for Hummingbird).
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // The system module's seam (errno as a type; already built for SwiftNIO).
        .package(url: "https://github.com/apple/swift-system", from: "1.4.0"),
    ],
    targets: [
        // The core: protocols, values, errors, configuration, registry, NDEF. Its few reads
        // (a bounded file, a memory file) go through swift-system, which retries an
        // interruption: no EINTR loop of its own.
        .target(
            name: "FieldHAL",
            dependencies: [.product(name: "TOMLKit", package: "TOMLKit"), .product(name: "SystemPackage", package: "swift-system")],
            swiftSettings: essentialsSwift
        ),
        // The Linux plumbing under the backends and the daemon: device threads and their
        // wake-ups, state and scratch directories, atomic files, and the one seam for system
        // calls (EINTR, errno as a typed error) on swift-system.
        // Naming a thread (pthread_setname_np, declared under _GNU_SOURCE only): no library.
        .systemLibrary(name: "CThreadName"),
        // The executable's program headers (dl_iterate_phdr, <link.h>): no library.
        .systemLibrary(name: "CLoader"),
        .target(name: "FieldHALSystem", dependencies: ["FieldHAL", "CThreadName", "CLoader", .product(name: "SystemPackage", package: "swift-system")],
                swiftSettings: essentialsSwift),
        // Recordings' containers: the WAV and Motion-JPEG AVI writers, JPEG's sizes and tables.
        .target(name: "FieldHALMedia", dependencies: ["FieldHALSystem", "FieldHAL"], swiftSettings: essentialsSwift),
        // Child processes: tools run to their end, plugin processes, a detached run.
        .target(name: "FieldHALProcess", dependencies: ["FieldHAL", "FieldHALSystem", "CSpawn", .product(name: "SystemPackage", package: "swift-system")], swiftSettings: essentialsSwift),
        // posix_spawn's closefrom and pidfd_open, for FieldHALProcess (part of libc).
        .systemLibrary(name: "CSpawn"),
        // Secrets at rest, over libsodium (a hard dependency: no trait).
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        // The vault, and every cipher and hash the product uses (the flows hold none).
        // OpenSSL's libcrypto, for the evidence's SHA-256 only (the CPU's SHA extensions).
        .systemLibrary(name: "CLibcrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .target(name: "FieldHALVault", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALProcess", "CSodium", "CLibcrypto", .product(name: "SystemPackage", package: "swift-system")],
                swiftSettings: strictSwift),
        // The kit's lock: PIN (argon2id), duress PIN, lockouts, relock, audit log.
        .target(name: "FieldHALLock", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALVault", "CSodium"], swiftSettings: strictSwift),

        // C libraries of the real backends, each built only when its trait is on.
        .systemLibrary(name: "CNFC", pkgConfig: "libnfc", providers: [.apt(["libnfc-dev"])]),
        .systemLibrary(name: "CGPS", pkgConfig: "libgps", providers: [.apt(["libgps-dev"])]),
        .systemLibrary(name: "CV4L2", pkgConfig: "libv4l2", providers: [.apt(["libv4l-dev", "libturbojpeg0-dev"])]),
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "CEvdev"),
        .systemLibrary(name: "CUdev", pkgConfig: "libudev", providers: [.apt(["libudev-dev"])]),
        // libmosquitto: the fleet bridge's MQTT client (issue 46).
        .systemLibrary(name: "CMosquitto", pkgConfig: "libmosquitto", providers: [.apt(["libmosquitto-dev"])]),
        // libsystemd's sd-bus: logind's shutdown inhibitor while evidence may be in the making.
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .target(name: "FieldHALLogind", dependencies: ["FieldHAL", "FieldHALSystem", "CSystemd", .product(name: "Logging", package: "swift-log")],
                swiftSettings: strictSwift),
        // The kit on a fleet's MQTT broker: devices, health and fixes, queued on disk.
        .target(name: "FieldHALMQTT", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", "CMosquitto", .product(name: "Logging", package: "swift-log")],
                swiftSettings: strictSwift),
        // Devices as they come and go (libudev's monitor), for the daemon.
        .target(name: "FieldHALHotplug", dependencies: ["FieldHAL", "FieldHALSystem", .target(name: "CUdev", condition: .when(traits: ["Hotplug"]))],
                swiftSettings: strictSwift),
        // External plugins (issue 21): their manifests, the plugin directories, the plugin
        // protocol's host side.
        // Sealed memfds, for bulk bytes beside the plugin protocol's messages (part of libc).
        .systemLibrary(name: "CMemfd"),
        .target(name: "FieldHALPluginProtocol", dependencies: ["FieldHAL", "FieldHALSystem", "CMemfd", .product(name: "SystemPackage", package: "swift-system")], swiftSettings: essentialsSwift),
        .target(name: "FieldHALPluginSDK", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALPluginProtocol"], swiftSettings: essentialsSwift),
        .target(name: "FieldHALPluginHost", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALMedia", "FieldHALProcess", "FieldHALPluginProtocol",
                                                           .product(name: "Logging", package: "swift-log")],
                swiftSettings: strictSwift),
        // glibc's mallopt, for the daemon's heap policy (no library: part of libc).
        .systemLibrary(name: "CMalloc"),

        // Plugins: one folder each. A plugin imports the core, the system module (its device
        // thread) and its own C module only.
        .target(name: "FakePlugin", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALMedia"], path: "Plugins/Fake", swiftSettings: essentialsSwift),
        // A kit recorded with `fieldhal record`, played back: no hardware, no C library.
        .target(name: "ReplayPlugin", dependencies: ["FieldHAL", "FieldHALMedia"], path: "Plugins/Replay", swiftSettings: essentialsSwift),
        // fprintd has no C library to link: the plugin runs its tools (FieldHALProcess).
        .target(name: "FprintdPlugin", dependencies: ["FieldHAL", "FieldHALProcess"], path: "Plugins/Fprintd", swiftSettings: essentialsSwift),
        .target(
            name: "LibnfcPlugin",
            dependencies: ["FieldHAL", "FieldHALSystem", .target(name: "CNFC", condition: .when(traits: ["NFC"]))],
            path: "Plugins/Libnfc", swiftSettings: essentialsSwift
        ),
        .target(
            name: "V4L2Plugin",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALMedia", .product(name: "SystemPackage", package: "swift-system"),
                           .target(name: "CV4L2", condition: .when(traits: ["V4L2"]))],
            path: "Plugins/V4L2", swiftSettings: essentialsSwift
        ),
        .target(
            name: "ALSAPlugin",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALMedia", .product(name: "SystemPackage", package: "swift-system"),
                           .target(name: "CALSA", condition: .when(traits: ["ALSA"]))],
            path: "Plugins/ALSA", swiftSettings: essentialsSwift
        ),
        .target(
            name: "EvdevPlugin",
            dependencies: ["FieldHAL", "FieldHALSystem", .target(name: "CEvdev", condition: .when(traits: ["Evdev"]))],
            path: "Plugins/Evdev", swiftSettings: essentialsSwift
        ),
        .target(
            name: "GpsdPlugin",
            dependencies: ["FieldHAL", "FieldHALSystem", .target(name: "CGPS", condition: .when(traits: ["GPS"]))],
            path: "Plugins/Gpsd", swiftSettings: essentialsSwift
        ),

        // The list of compiled-in plugins: the only place that names them all.
        .target(
            name: "FieldHALPlugins",
            dependencies: ["FieldHAL", "FakePlugin", "ReplayPlugin", "FprintdPlugin", "GpsdPlugin", "LibnfcPlugin", "V4L2Plugin", "ALSAPlugin", "EvdevPlugin"] + backendTraits.compactMap { entry in
                entry.cModule.isEmpty ? nil : .target(name: entry.cModule, condition: .when(traits: [entry.trait]))
            },
            swiftSettings: essentialsSwift
        ),

        // The Transrify API: its client over AsyncHTTPClient, and apart from it its wire values
        // alone (no HTTP stack), so that the fuzz target can
        // decode exactly what the client decodes without building SwiftNIO with sanitizers.
        .target(name: "TransrifyWire", swiftSettings: strictSwift),
        .target(name: "Transrify", dependencies: ["TransrifyWire", .product(name: "AsyncHTTPClient", package: "async-http-client"),
                                                  .product(name: "NIOCore", package: "swift-nio"),
                                                  .product(name: "NIOPosix", package: "swift-nio"),
                                                  .product(name: "NIOHTTP1", package: "swift-nio")],
                swiftSettings: strictSwift),
        // The alerts WebSocket channel's client (Req 35), apart so that Transrify stays small.
        .target(
            name: "TransrifyAlertChannel",
            dependencies: ["Transrify", .product(name: "WSClient", package: "swift-websocket"),
                           .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictSwift,
            linkerSettings: kitProcessLinking
        ),
        // A faithful, persistent Transrify server for labs and tests, and its executable.
        .target(
            name: "TransrifyLabServer",
            dependencies: [
                // FieldHALMedia: the WAV and AVI writers an export joins segments with.
                "Transrify", "CSodium", "FieldHAL", "FieldHALMedia",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: strictSwift
        ),
        .executableTarget(
            name: "fieldhal-labserver",
            dependencies: ["TransrifyLabServer", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strictSwift
        ),

        // The product's flows: duress sign-in, the background work after it, evidence.
        .target(name: "FieldHALFlows", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALVault", "Transrify", "TransrifyAlertChannel",
                                                       .product(name: "SystemPackage", package: "swift-system")],
                swiftSettings: strictSwift),

        // The parsers of outside input as libFuzzer targets (fuzz/run builds them with
        // -sanitize=fuzzer,address -DFUZZING); built normally it replays a corpus.
        .executableTarget(name: "fieldhal-fuzz", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", "FieldHALVault", "FieldHALLock", "FieldHALPluginProtocol", "TransrifyWire", "CSodium"],
                          path: "fuzz/Sources/fieldhal-fuzz", swiftSettings: strictSwift),

        // The hardware API (issue 20): its wire values, and its server on a Unix socket.
        .target(name: "FieldHALAPI", dependencies: ["FieldHALSystem", "FieldHAL"], swiftSettings: strictSwift),
        // A SwiftNIO event loop as a task executor: the server's event stream runs on the loop
        // of its connection (no thread woken in between).
        .target(name: "EventLoopExecutor", dependencies: [.product(name: "NIOCore", package: "swift-nio")], swiftSettings: strictSwift),
        .target(
            name: "FieldHALServer",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", "FieldHALHotplug", "EventLoopExecutor", .product(name: "Hummingbird", package: "hummingbird"),
                           .product(name: "HummingbirdCore", package: "hummingbird"),
                           .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                           // The caller gate's handlers sit in the HTTP pipeline Hummingbird builds from these.
                           .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                           .product(name: "Logging", package: "swift-log"), .product(name: "Prometheus", package: "swift-prometheus"),
                           .product(name: "SystemPackage", package: "swift-system")],
            // The JavaScript client the web door serves, compiled into the server: no file to
            // find at run time.
            resources: [.embedInCode("WebClient/fieldhal.js"), .embedInCode("WebClient/fieldhal.d.ts")],
            swiftSettings: strictSwift
        ),
        // A Swift client of that API: blocking calls on threads of its own, no event loop.
        .target(
            name: "FieldHALClient",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI"],
            swiftSettings: strictSwift
        ),

        // What both command-line programs share: options, the commands the front serves
        // (names, help, output), exit codes, and a blocking one-call client of the API.
        .target(
            name: "FieldHALCommandLine",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strictSwift
        ),
        // The front: no backend, no HTTP stack, no event loop (its start is every script's cost).
        .executableTarget(
            name: "fieldhal-front",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", "FieldHALCommandLine",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strictSwift
        ),
        // What a command runs with: the configuration, the state directory, the kit, the flows'
        // settings, and errors turned into a line and an exit code. The CLI and the
        // benchmarks are built on it; the front is not (it stays small).
        .target(
            name: "FieldHALComposition",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALVault", "FieldHALAPI", "FieldHALServer", "FieldHALPlugins", "FieldHALPluginHost", "FieldHALFlows",
                           "FieldHALLock", "FieldHALClient", "Transrify", "TransrifyAlertChannel", "FieldHALCommandLine", "FieldHALMQTT",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strictSwift
        ),
        // The daemon (`fieldhal run`): its services over the devices it holds, and the API's
        // flow routes; the executable only starts it.
        .target(
            name: "FieldHALDaemon",
            dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", "FieldHALServer", "FieldHALClient", "FieldHALLock", "FieldHALFlows", "FieldHALVault",
                           "FieldHALCommandLine", "FieldHALComposition", "FieldHALHotplug", "FieldHALMQTT", "FieldHALLogind", "Transrify",
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strictSwift
        ),
        .executableTarget(
            name: "fieldhal",
            dependencies: ["FieldHALSystem", 
                "FieldHAL", "FieldHALVault", "FieldHALAPI", "FieldHALServer", "FieldHALClient", "FieldHALLock", "FieldHALPlugins", "FieldHALFlows", "Transrify",
                "FieldHALCommandLine", "FieldHALHotplug", "FieldHALPluginHost", "FieldHALPluginSDK", "CMalloc", "FieldHALComposition", "FieldHALProcess", "FieldHALDaemon", "FieldHALMedia",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictSwift,
            linkerSettings: kitProcessLinking
        ),

        // A built-in plugin in a process of its own (`fieldhal plugin serve` runs it): the
        // backends and the SDK on FoundationEssentials, without the rest of the CLI.
        .executableTarget(name: "fieldhal-plugin", dependencies: ["FieldHAL", "FieldHALPluginSDK", "FieldHALPlugins"], swiftSettings: essentialsSwift,
                          linkerSettings: kitProcessLinking),

        // The benchmarks: a tool of the repository's, not installed by the package.
        .executableTarget(
            name: "fieldhal-bench",
            dependencies: ["FieldHALSystem", 
                "FieldHAL", "FieldHALComposition", "FieldHALVault", "FieldHALAPI", "FieldHALClient", "FieldHALLock", "FieldHALPlugins",
                "FieldHALFlows", "Transrify", "TransrifyAlertChannel", "FieldHALCommandLine", "FieldHALPluginHost",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictSwift
        ),

        .testTarget(name: "FieldHALTests", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALProcess", "FieldHALMedia", "TestSupport"], swiftSettings: strictSwift),
        .testTarget(name: "VaultTests", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALVault", "CSodium"], exclude: ["nacl-peer.py"],
                    swiftSettings: strictSwift),
        .testTarget(name: "PluginHostTests", dependencies: ["FieldHAL", "FieldHALProcess", "FieldHALMedia", "FieldHALPluginHost", "FieldHALPluginSDK", "FieldHALServer", "TestSupport", "FakePlugin",
                                                       .product(name: "Logging", package: "swift-log")],
                    exclude: ["fixture-plugin.py", "media-plugin.py", "nmea-pty.py"], swiftSettings: strictSwift),
        .testTarget(name: "FakePluginTests", dependencies: ["FieldHAL", "FieldHALMedia", "FakePlugin"], swiftSettings: strictSwift),
        .testTarget(name: "CLITests", dependencies: ["FieldHALSystem", "fieldhal", "fieldhal-front", "fieldhal-bench", "FieldHALCommandLine", "TestSupport", "Transrify", "TransrifyLabServer", "FieldHAL", "FieldHALAPI", "FieldHALClient"], swiftSettings: strictSwift),
        .testTarget(name: "GpsdPluginTests", dependencies: ["FieldHAL", "FieldHALAPI", "GpsdPlugin", "FieldHALPluginHost", "TestSupport"],
                    exclude: ["Logs", "Golden"], swiftSettings: strictSwift),

        .testTarget(name: "LibnfcPluginTests", dependencies: ["FieldHAL", "FieldHALAPI", "LibnfcPlugin", "FieldHALPluginHost", "TestSupport"],
                    exclude: ["Golden"], swiftSettings: strictSwift),
        .testTarget(name: "FlowsTests", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALProcess", "FieldHALMedia", "TestSupport", "FieldHALVault", "FieldHALFlows", "Transrify", "TransrifyAlertChannel", "TransrifyLabServer", "CSodium", "FakePlugin"],
                    swiftSettings: strictSwift),
        .testTarget(name: "TransrifyTests", dependencies: ["Transrify", "TestSupport", "TransrifyLabServer", "CSodium"], swiftSettings: strictSwift),
        .testTarget(name: "LockTests", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALVault", "FieldHALLock"], swiftSettings: strictSwift),
        .testTarget(name: "DaemonTests", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", "FieldHALClient", "FieldHALCommandLine", "FieldHALDaemon", "FieldHALMedia", "FieldHALLogind", "FieldHALMQTT", "TestSupport",
                                                       .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                                                       .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                                                       .product(name: "Logging", package: "swift-log")],
                    swiftSettings: strictSwift),
        .testTarget(name: "MQTTTests", dependencies: ["FieldHAL", "FieldHALAPI", "FieldHALMQTT", "TestSupport",
                                                     .product(name: "Logging", package: "swift-log")],
                    swiftSettings: strictSwift),
        .testTarget(name: "ServerTests", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALAPI", "FieldHALServer", "FieldHALHotplug", "FakePlugin", "LibnfcPlugin", "TestSupport"], swiftSettings: strictSwift),
        .testTarget(name: "FprintdPluginTests", dependencies: ["FieldHAL", "FprintdPlugin", "FieldHALPluginHost", "TestSupport"], swiftSettings: strictSwift),

        // The real camera, sound and haptics backends against the kernel's vivid, snd-aloop,
        // snd-dummy and uinput drivers: run in the kernel lab by lab/device-tests.
        .testTarget(name: "DeviceTests", dependencies: ["FieldHAL", "FieldHALSystem", "FieldHALMedia", "FieldHALFlows", "FieldHALVault", "Transrify", "FieldHALHotplug", "FieldHALServer", "FieldHALPlugins", "FieldHALPluginHost", "V4L2Plugin", "ALSAPlugin", "EvdevPlugin", "TestSupport", "fieldhal", "fieldhal-front"],
                    swiftSettings: strictSwift),

        // Helpers the tests share: real peers (gpsfake) started and stopped as processes.
        .target(name: "TestSupport", dependencies: ["FieldHAL", "FieldHALProcess", .product(name: "Logging", package: "swift-log")], path: "Tests/TestSupport", exclude: ["Peers"], swiftSettings: strictSwift),
    ]
)
