import Foundation

/// Runs the built `fieldhal` binary, as a technician would.
public struct CLI {
    /// The whole CLI (installed as `libexec/fieldhal/fieldhal`). The CLI suites run it
    /// directly: through the front every command would start two processes, and the parallel
    /// suites then loaded two CPUs past the timing bounds of other tests.
    public static let binary: URL = products.appendingPathComponent("fieldhal")

    /// The whole CLI, by the name the front's tests give it.
    public static let wholeBinary: URL = binary

    /// `fieldhal` as installed: the front (`fieldhal-front`), which answers the daemon's
    /// commands itself and hands every other command to the whole CLI beside it. `FrontTests`
    /// run it; `lab/stealth-check` and `lab/systemd-check` use it as a user would.
    public static let frontBinary: URL = products.appendingPathComponent("fieldhal-front")

    /// The build's products directory: the test bundle sits beside the products of the same build.
    public static let products: URL = {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("fieldhal").path), directory.path != "/" {
            directory.deleteLastPathComponent()
        }
        return directory
    }()

    public static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    public struct Result: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
        public init(status: Int32, stdout: String, stderr: String) {
            self.status = status
            self.stdout = stdout
            self.stderr = stderr
        }
    }

    /// Called before each command `run` starts, with its arguments and extra environment;
    /// returns the environment to run it with. The CLI suites that run both ways set it to
    /// start a daemon for the command's kit first (CLITests' `eachWay`).
    @TaskLocal public static var beforeEachCommand: (@Sendable (_ arguments: [String], _ environment: [String: String]) async throws -> [String: String])?

    /// Runs the binary on a thread of its own (tests must not block the cooperative pool).
    public static func run(_ arguments: [String], environment extra: [String: String] = [:], input: String? = nil) async throws -> Result {
        let extra = try await beforeEachCommand?(arguments, extra) ?? extra
        return try await offPool { try runBlocking(arguments, environment: extra, input: input) }
    }

    /// `fieldhal-bench`, the benchmarks (a tool of the repository's, built beside the CLI).
    public static func bench(_ arguments: [String], environment extra: [String: String] = [:]) async throws -> Result {
        try await offPool { try runBlocking(arguments, environment: extra, executable: products.appendingPathComponent("fieldhal-bench")) }
    }

    /// A fresh state directory of the kind `runBlocking` gives a command run without one.
    public static func freshStateDirectory() -> String {
        NSTemporaryDirectory() + "fieldhal-cli-\(UUID().uuidString)"
    }

    /// Another program (ffprobe, a libnfc tool), the same way.
    public static func runTool(_ path: String, _ arguments: [String]) async throws -> Result {
        try await offPool { try runBlocking(arguments, executable: URL(fileURLWithPath: path)) }
    }

    /// The longest any command or tool a test runs may take: past it the program is killed
    /// and the result says so (status 124), so that a hang fails its own test by name
    /// instead of holding the whole run until CI's limit. Generous: the longest run today,
    /// schemathesis on the API, takes about 150 s.
    public static let longestRun: Duration = .seconds(600)

    public static func runBlocking(_ arguments: [String], environment extra: [String: String] = [:], input: String? = nil,
                                   executable: URL = binary, timeout: Duration = longestRun) throws -> Result {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        // The built-in fake kit unless a test says otherwise: it must be asked for by name.
        environment["FIELDHAL_CONFIG"] = "fake"
        environment["FIELDHAL_STATE_DIR"] = freshStateDirectory()
        environment.merge(extra) { $1 }
        process.environment = environment
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let stdin = Pipe()
        process.standardInput = input == nil ? FileHandle.nullDevice : stdin
        try process.run()
        // Both pipes at once: reading one to its end first deadlocked whenever the program
        // filled the other's 64 KiB (it then waits for us, and we for it).
        let stdout = PipeDrain(out.fileHandleForReading), stderr = PipeDrain(err.fileHandleForReading)
        if let input {
            stdin.fileHandleForWriting.write(Data(input.utf8))
            try stdin.fileHandleForWriting.close()
        }
        let deadline = ContinuousClock.now + timeout
        while process.isRunning, ContinuousClock.now < deadline { usleep(5_000) }
        let timedOut = process.isRunning
        if timedOut {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        // A program's children may keep its pipes open after it ends: what they wrote by
        // then is read, and the run does not wait on them.
        let said = stderr.collected(waitingUpTo: .seconds(5))
        return Result(status: timedOut ? 124 : process.terminationStatus,
                      stdout: String(decoding: stdout.collected(waitingUpTo: .seconds(5)), as: UTF8.self),
                      stderr: String(decoding: said, as: UTF8.self)
                          + (timedOut ? "\n[test support: \(executable.lastPathComponent) \(arguments.prefix(3).joined(separator: " ")) killed after \(timeout)]\n" : ""))
    }

    public static var exampleConfig: String { repositoryRoot.appendingPathComponent("examples/fake-kit.toml").path }
}


/// A pipe read to its end on a thread of its own.
final class PipeDrain: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()
    private let finished = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        Thread { [self] in
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                lock.withLock { data += chunk }
            }
            finished.signal()
        }.start()
    }

    /// What was read: all of it once the pipe ends, or what had come after `limit`.
    func collected(waitingUpTo limit: Duration) -> Data {
        _ = finished.wait(timeout: .now() + .milliseconds(Int(limit.components.seconds * 1000)))
        return lock.withLock { data }
    }
}
