import FieldHAL
import FieldHALPluginHost
import Foundation
import TestSupport
import Testing

/// The device tests run inside the kernel lab (`lab/device-tests`, which boots Debian's
/// kernel under QEMU with vivid, snd-aloop, snd-dummy and uinput loaded, and sets
/// FIELDHAL_KERNEL_LAB=1). Under a plain `swift test` on the host they are skipped; the
/// host-side ALSA test (the `file` plugin) runs everywhere.
enum KernelLab {
    static let isGuest = ProcessInfo.processInfo.environment["FIELDHAL_KERNEL_LAB"] == "1"

    static let context = PluginContext(configDirectory: "/tmp", stateDirectory: "/tmp")

    /// Runs a command to completion off the cooperative pool; returns status and output.
    @discardableResult
    static func run(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        try await offPool {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
    }

    /// Starts a peer process (aplay, a script) with its output discarded; stop it with `finish`.
    static func start(_ executable: String, _ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Kills a peer and waits for it to exit (so its device is free for the next test).
    /// SIGKILL, not SIGTERM: a child of the test runner may inherit SIGTERM blocked, and the
    /// kernel frees what the peer held (a uinput device, a PCM) when its descriptors close.
    static func finish(_ process: Process) async throws {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        try await offPool { process.waitUntilExit() }
    }

    /// Writes to a sysfs attribute (unbinding a driver from a device, and binding it back).
    static func writeSysfs(_ path: String, _ value: String) throws {
        guard let handle = FileHandle(forWritingAtPath: path) else { throw LabError("cannot open \(path)") }
        defer { try? handle.close() }
        try handle.write(contentsOf: Data(value.utf8))
    }

    /// The /dev/video node of a vivid instance's capture device (`vivid-000-vid-cap`).
    static func vividCaptureNode(instance: Int) throws -> String {
        let names = try FileManager.default.contentsOfDirectory(atPath: "/sys/class/video4linux")
        for name in names.sorted() {
            let label = try? String(contentsOfFile: "/sys/class/video4linux/\(name)/name", encoding: .utf8)
            if label?.trimmingCharacters(in: .whitespacesAndNewlines) == String(format: "vivid-%03d-vid-cap", instance) {
                return "/dev/\(name)"
            }
        }
        throw LabError("no capture node for vivid instance \(instance) (is vivid loaded with n_devs=2?)")
    }

    static func scratch(_ name: String) -> String { NSTemporaryDirectory() + "fieldhal-device-\(UUID().uuidString)-\(name)" }

    /// Waits until a video recording into `path` has written its first frame: in process
    /// into `.NAME.tmp-…` beside `path`, out of process into a `.fieldhal-plugin-…`
    /// directory there. A test that unplugs the camera mid-recording waits for this rather
    /// than a fixed time: on a slow CI host the plugin process's first frame came more than
    /// a second after the call, and an unplug before any frame has nothing to keep.
    static func firstFrameWritten(into path: String, within limit: Duration = .seconds(15)) async throws {
        let directory = (path as NSString).deletingLastPathComponent
        let ownTemporary = ".\((path as NSString).lastPathComponent).tmp-"
        func beingWritten() -> [String] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            return names.flatMap { name -> [String] in
                if name.hasPrefix(ownTemporary) { return ["\(directory)/\(name)"] }
                guard name.hasPrefix(".fieldhal-plugin-") else { return [] }
                let inside = (try? FileManager.default.contentsOfDirectory(atPath: "\(directory)/\(name)")) ?? []
                return inside.map { "\(directory)/\(name)/\($0)" }
            }
        }
        // The `movi` list's type, then a frame's chunk header ("00dc", its length) and its JPEG.
        func holdsAFrame(_ file: String) -> Bool {
            guard let bytes = FileManager.default.contents(atPath: file),
                  let movi = bytes.range(of: Data("movi".utf8)) else { return false }
            return bytes.count > movi.upperBound + 8 + 2
        }
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            if beingWritten().contains(where: holdsAFrame) { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw LabError("no frame written into \(path) (or a plugin's directory beside it) within \(limit)")
    }

    /// The directories an out-of-process recording was written into, still beside the
    /// scratch paths (none should outlive its recording, whatever ended it).
    static var pluginDirectoriesLeft: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory())) ?? []).filter { $0.hasPrefix(".fieldhal-plugin-") }
    }

    /// Whether they are gone within 5 s: after a cancel the caller returns at once and the
    /// directory goes when the plugin has answered the cancelled request.
    static func pluginDirectoriesGo() async -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while !pluginDirectoriesLeft.isEmpty, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        return pluginDirectoriesLeft.isEmpty
    }

    /// Reads a 16-bit mono WAV written by FieldHAL (44-byte header).
    static func samples(ofWAV path: String) throws -> [Int16] {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        return data.dropFirst(44).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
    }

    /// Upward zero crossings per second: the frequency of a clean tone.
    static func frequency(of samples: some Collection<Int16>, sampleRate: Int) -> Double {
        var crossings = 0
        var previous: Int16 = 0
        for sample in samples {
            if previous < 0 && sample >= 0 { crossings += 1 }
            previous = sample
        }
        return Double(crossings) * Double(sampleRate) / Double(samples.count)
    }
}

/// How a device test reaches the backend: in this process, or out of process as an
/// external plugin (`fieldhal plugin serve PLUGIN` behind a manifest, through the plugin
/// protocol), against the same kernel device.
enum Way: String, CaseIterable, CustomTestStringConvertible {
    case inProcess = "in process"
    case outOfProcess = "out of process"
    var testDescription: String { rawValue }

    /// The built-in plugin's descriptor, or the same plugin installed as an external one.
    func descriptor(_ builtIn: PluginDescriptor, _ plugin: String) async throws -> PluginDescriptor {
        guard self == .outOfProcess else { return builtIn }
        return try PluginManifest.load(try await ExternalBuiltin.install(plugin, as: "\(plugin)-process")).descriptor()
    }
}

struct LabError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension FieldHALError.Kind {
    /// For `#expect(throws:)`: whether `error` is a FieldHALError of this kind.
    func matches(_ error: any Error) -> Bool { (error as? FieldHALError)?.kind == self }
}
