import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALClient
import FieldHALCommandLine
import FieldHALComposition
import FieldHALSystem
import Foundation

/// `fieldhal record`: the running daemon's receivers and readers, recorded to a trace the
/// `replay` plugin plays back.
struct RecordCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Record what the kit's devices do, to play it back later.",
        discussion: """
        Follows the daemon answering on the configuration's [api] socket (fieldhal run) and \
        writes each fix, each tag found or lost, each change of a device's state, and each \
        use of a device by the daemon's clients with its answer (a haptic pattern, a sound, \
        a fingerprint's outcome, a still or a recording by its size, a tag written, with \
        its exchanges when the reader keeps them) to FILE, one JSON line \
        each with its time from the start (a trace: docs/testing.md, Record and replay). \
        Nothing else: never a PIN, a key, a session, an alert, the lock's events or the \
        kit's own work with its devices. A section ([gps], [nfc], [haptics], [speaker], \
        [biometrics], [camera], [microphone]) with plugin = "replay" and trace = FILE plays it back \
        (speed = 10 for ten times faster). With --device or --all, uses of other devices \
        are left out. Stops after --seconds, when the daemon stops, or when \
        interrupted (every line is written as it happens). The file is made 0600 and never \
        follows a symbolic link. Exit status: 0; 69 when no daemon answers; 73 when FILE \
        cannot be made.
        """)
    @OptionGroup var global: GlobalOptions
    @OptionGroup var watched: WatchedDevices
    @Option(name: .long, help: ArgumentHelp("The trace file to write (replaced).", valueName: "file")) var output: String
    @Option(help: "Stop after this many seconds (default: until interrupted).") var seconds: Double?

    func execute(_ environment: Environment) async throws {
        let descriptor = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            Output.failure("cannot write the trace \(output): \(SystemError.describe()) — choose a file you may write (it is never a symbolic link)")
            throw ExitCode(73)  // EX_CANTCREAT
        }
        defer { close(descriptor) }
        fchmod(descriptor, 0o600)
        func write(_ line: String) throws {
            let bytes = Array((line + "\n").utf8)
            let failure = bytes.withUnsafeBytes { buffer -> FieldHALError? in
                do throws(FieldHALError) {
                    try SystemCall.writeAll(buffer, to: descriptor, file: "trace \(output)")
                    return nil
                } catch { return error }
            }
            if let failure { throw failure }
        }
        let file = environment.configuration.file
        let recorded = LockedValue(0)
        let served: Void? = try await environment.throughDaemon { daemon in
            let devices = try await daemon.devices()
            let names = watched.all ? devices.filter { [.location, .nfcReader].contains($0.capability) }.compactMap(\.name) : watched.names
            // The daemon refuses a stream of a type the kit has no device for (a tag event
            // with no [nfc]): ask for the kinds this kit has.
            let configured = Set(devices.filter { $0.state != .notConfigured }.map(\.capability))
            let kinds: [APIEvent.Kind] = (configured.contains(.location) ? [.fix] : []) + (configured.contains(.nfcReader) ? [.tag] : []) + [.capability, .use]
            let usesOf = watched.all || watched.names.isEmpty ? nil : Set(watched.names)
            try write(try KitTrace.line(KitTrace.Header(recordedAt: Date(), source: file)))
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await event in daemon.events(kinds, devices: Array(Set(names)).sorted()) {
                        let elapsed = ContinuousClock.now - started
                        let t = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                        let entry: KitTrace.Entry
                        switch event {
                        case .fix(let fix, let device):
                            entry = KitTrace.Entry(t: t, device: "\(Capability.location.rawValue).\(device ?? KitConfiguration.defaultDeviceName)", fix: fix)
                        case .tag(let found):
                            entry = KitTrace.Entry(t: t, device: "\(Capability.nfcReader.rawValue).\(found.device ?? KitConfiguration.defaultDeviceName)",
                                                   tag: try NFCTag(api: found.tag), tagState: found.state.rawValue)
                        case .capability(let status):
                            entry = KitTrace.Entry(t: t, device: "\(status.capability.rawValue).\(status.name ?? KitConfiguration.defaultDeviceName)", state: status)
                        case .use(let use):
                            if let usesOf, !usesOf.contains(use.device) { continue }
                            entry = KitTrace.Entry(t: t, device: "\(use.request.capability.rawValue).\(use.device)", use: use)
                        default:
                            continue
                        }
                        try write(try KitTrace.line(entry))
                        recorded.withLock { $0 += 1 }
                    }
                }
                if let seconds {
                    // In the group, so that cancelling it ends the wait (a task's value
                    // awaited from the group would keep the group open until the time is up).
                    group.addTask { try? await Task.sleep(for: .seconds(seconds)) }
                    // The first to end (the time is up, or the daemon stopped) ends the recording.
                    try await group.next()
                    group.cancelAll()
                } else {
                    try await group.waitForAll()
                }
            }
        }
        guard served != nil else {
            Output.failure("no daemon answers on \(environment.apiSocketPath): `fieldhal record` follows a running daemon (fieldhal run, or the fieldhal service)")
            throw ExitCode(69)  // EX_UNAVAILABLE
        }
        FileHandle.standardError.write(Data("recorded \(recorded.value) entries to \(output)\n".utf8))
    }
}
