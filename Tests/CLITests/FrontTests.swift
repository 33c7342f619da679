import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-front`, installed as `fieldhal`: it answers the daemon's commands itself and
/// hands everything else to the whole CLI. These tests show which of the two answered, that
/// the answers are the whole CLI's, and how the front takes a daemon that misbehaves.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FrontTests {
    static let served: [[String]] = [
        ["status"], ["status", "--json"], ["daemon", "status"], ["daemon"], ["daemon", "health"], ["daemon", "health", "--json"], ["gps", "fix"], ["gps", "fix", "--json", "--max-age", "0"],
        ["nfc", "read", "--timeout", "3"], ["nfc", "write", "--text", "hello", "--timeout", "3"], ["lock", "status"], ["lock", "status", "--json"],
        ["haptics", "play", "warning"], ["sound", "play"], ["bio", "status", "--json"],
        // Refused before the daemon is asked, in the whole CLI's words.
        ["haptics", "play", "no-such-pattern"], ["gps", "fix", "--timeout", "0"], ["nfc", "write", "--timeout", "3"],
    ]

    /// A front with no whole CLI beside it answers every served command from the daemon, with
    /// the output and status the whole CLI gives for it; anything else it cannot hand over.
    @Test func theFrontAnswersTheDaemonsCommandsByItself() async throws {
        let state = try kitState()
        let daemon = try DaemonProcess(["--config", CLI.exampleConfig, "--state-dir", state])
        defer { Task { _ = await daemon.stop() } }
        #expect(await daemon.waitForServing(), "\(daemon.output)")
        let alone = try loneFront()
        for command in Self.served {
            let arguments = command + ["--config", CLI.exampleConfig, "--state-dir", state]
            let front = try await run(alone, arguments)
            let whole = try await run(CLI.wholeBinary.path, arguments)
            #expect(front.status == whole.status, "\(command): \(front.stderr)")
            // The fake receiver moves along its track: a fix may differ in its figures.
            let figures = /-?[0-9]+(\.[0-9]+)?/
            let comparable = { (text: String) in command.first == "gps" ? text.replacing(figures, with: "N") : text }
            #expect(comparable(front.stdout) == comparable(whole.stdout), "\(command)")
            #expect(front.stderr == whole.stderr, "\(command)")
            #expect(!front.stderr.contains("not installed beside"), "\(command) was handed over: \(front.stderr)")
        }
        // Not the front's: handed over, and here there is nothing to hand it to.
        for command in [["plugins"], ["--help"], ["gps", "watch"], ["nfc", "read", "--no-such-option"], ["gps", "fix", "--timeout", "120"], ["gps", "fix", "--timeout", "-1"]] {
            let front = try await run(alone, command + ["--config", CLI.exampleConfig, "--state-dir", state])
            #expect(front.status == 69, "\(command)")
            #expect(front.stderr.contains("the whole fieldhal CLI is not installed beside this program"), "\(command): \(front.stderr)")
        }
        #expect(await daemon.stop().status == 0)
    }

    /// Without a daemon the front hands every command over: the whole CLI opens the kit.
    @Test func withoutADaemonTheWholeCLIAnswers() async throws {
        let state = try kitState()
        let alone = try loneFront()
        let handedOver = try await run(alone, ["status", "--config", CLI.exampleConfig, "--state-dir", state])
        #expect(handedOver.status == 69 && handedOver.stderr.contains("not installed beside"), "\(handedOver)")
        let front = try await run(CLI.frontBinary.path, ["status", "--config", CLI.exampleConfig, "--state-dir", state])
        let whole = try await run(CLI.wholeBinary.path, ["status", "--config", CLI.exampleConfig, "--state-dir", state])
        #expect(front.status == 0 && front.stdout == whole.stdout && front.stderr == whole.stderr, "\(front)")
        // A configuration it cannot read is the whole CLI's to report.
        let broken = scratch("broken.toml")
        try "[kit\nname = ".write(toFile: broken, atomically: true, encoding: .utf8)
        let refused = try await run(CLI.frontBinary.path, ["status", "--config", broken, "--state-dir", state])
        #expect(refused.status == 78 && refused.stderr.contains("not valid TOML"), "\(refused)")
        // Help and the version are the whole CLI's.
        let help = try await run(CLI.frontBinary.path, ["--help"])
        #expect(help.status == 0 && help.stdout.contains("SUBCOMMANDS:") && help.stdout.contains("vault"), "\(help.stdout)")
        let version = try await run(CLI.frontBinary.path, ["--version"])
        #expect(version.status == 0 && version.stdout.hasPrefix("0."), "\(version)")
    }

    /// The front's client against a daemon that answers badly: each gives a typed error
    /// within its bound, none a crash or a hang.
    @Test func aDaemonThatAnswersBadly() async throws {
        let problem = #"{"error":{"kind":"busy","subject":"nfc","detail":"held","advice":"wait","status":409}}"#
        let cases: [(String, (Data?, (any Error)?) -> Bool)] = [
            // Chunked, with an extension on a size line: decoded.
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n",
             { body, _ in body.map { String(decoding: $0, as: UTF8.self) } == "{\"a\":1}" }),
            // Content-Length shorter than what follows: only what it says.
            ("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}trailing", { body, _ in body == Data("{}".utf8) }),
            // An error body: the daemon's problem, typed.
            ("HTTP/1.1 409 Conflict\r\nContent-Length: \(problem.utf8.count)\r\n\r\n" + problem,
             { _, error in (error as? APIProblem)?.kind == "busy" && "\(error!)" == "nfc: held — wait" }),
            ("HTTP/1.1 500 Oops\r\nContent-Length: 3\r\n\r\nno!", { _, error in
                (error as? FieldHALError)?.kind == .protocolError && "\(error!)".contains("HTTP 500 without an error body") }),
            ("garbage that is not HTTP\r\n\r\n", { _, error in (error as? FieldHALError)?.kind == .protocolError }),
            ("", { _, error in error.map { "\($0)".contains("closed the connection without an answer") } ?? false }),
            ("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", { _, error in (error as? FieldHALError)?.kind == .disconnected }),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", { _, error in (error as? FieldHALError)?.kind == .protocolError }),
        ]
        for (answer, check) in cases {
            let server = try OneAnswerServer(answer: Array(answer.utf8))
            var socket = DaemonSocket(path: server.path)
            socket.slack = .seconds(2)
            let outcome = await Self.callCapturing(socket)
            _ = try? await offPool { server.stop() }  // it waits for the server's thread: not on the pool
            #expect(check(outcome.body, outcome.error), "answer \(answer.debugDescription): \(String(describing: outcome.error))")
        }
        // Silence: a timeout after the wait and the slack, not a hang.
        let silent = try OneAnswerServer(answer: nil)
        var socket = DaemonSocket(path: silent.path)
        socket.slack = .milliseconds(500)
        let start = ContinuousClock.now
        let thrown = await Self.callCapturing(socket)
        let took = ContinuousClock.now - start
        #expect((thrown.error as? FieldHALError)?.kind == .timeout, "\(String(describing: thrown.error))")
        #expect(took >= .milliseconds(450) && took < .seconds(3), "\(took)")
        _ = try? await offPool { silent.stop() }
        // A socket file nobody listens on, or none at all: no daemon, the CLI does the work.
        let stale = scratch("stale.sock")
        let listener = try OneAnswerServer(answer: nil, at: stale)
        _ = try? await offPool { listener.stop() }
        #expect(FileManager.default.fileExists(atPath: stale))
        #expect(await Self.callCapturing(DaemonSocket(path: stale)).answeredNil)
        #expect(await Self.callCapturing(DaemonSocket(path: scratch("absent.sock"))).answeredNil)
    }

    private static func callCapturing(_ socket: DaemonSocket) async -> (body: Data?, error: (any Error)?, answeredNil: Bool) {
        let result = try? await offPool { () -> Result<Data?, any Error> in
            Result { try socket.call("GET", "status") }
        }
        switch result {
        case .success(let body)?: return (body, nil, body == nil)
        case .failure(let error)?: return (nil, error, false)
        case nil: return (nil, nil, false)
        }
    }

    /// `%.Nf` as printf writes it, which the whole CLI printed before the front shared its output.
    @Test func decimalsAreWrittenAsPrintfWritesThem() {
        var generator = SystemRandomNumberGenerator()
        var values: [Double] = [0, -0.0, 0.5, 1.5, 2.5, -2.5, 0.125, 0.375, 2.675, 1.005, -0.04, 52.520008, 13.404954, 999_999.95,
                                4.5, 4.05, 4.15, 1e-7, -1e-7, 123_456_789.123456, .nan, .infinity, -.infinity]
        for _ in 0..<20_000 {
            values.append(Double.random(in: -200...200, using: &generator))
            values.append(Double(Int.random(in: -100_000...100_000, using: &generator)) / 1000)  // metres and degrees, as fixes have them
        }
        for value in values {
            for places in [1, 2, 6] {
                #expect(Decimals.format(value, places) == String(format: "%.\(places)f", value), "\(value) to \(places) places")
            }
        }
    }

    // MARK: Helpers

    private func kitState() throws -> String {
        let state = CLI.freshStateDirectory()
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return state
    }

    /// A copy of the front in a directory of its own: nothing to hand a command to.
    private func loneFront() throws -> String {
        let directory = scratch("front")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let copy = directory + "/fieldhal"
        try FileManager.default.copyItem(atPath: CLI.frontBinary.path, toPath: copy)
        return copy
    }

    private func run(_ executable: String, _ arguments: [String]) async throws -> CLI.Result {
        try await offPool { try CLI.runBlocking(arguments, executable: URL(fileURLWithPath: executable)) }
    }
}

/// A Unix socket server that answers one connection with fixed bytes and closes it (nil:
/// it reads and says nothing, until stopped).
final class OneAnswerServer: @unchecked Sendable {
    let path: String
    private let stopped = LockedValue(false)
    /// Signalled when the server's thread has closed its socket: a descriptor closed under a
    /// thread still using it could be reused by the next server's socket and answered wrongly.
    private let done = DispatchSemaphore(value: 0)

    init(answer: [UInt8]?, at path: String = scratch("front.sock")) throws {
        self.path = path
        let listening = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listening, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listening, 4) == 0 else {
            close(listening)
            throw FieldHALError(.io, subject: path, detail: "bind/listen failed")
        }
        let stopped = self.stopped, done = self.done
        Thread {
            defer {
                close(listening)
                done.signal()
            }
            while !stopped.value {
                var wait = pollfd(fd: listening, events: Int16(POLLIN), revents: 0)
                guard poll(&wait, 1, 50) > 0 else { continue }
                let connection = accept(listening, nil, nil)
                guard connection >= 0 else { continue }
                var request = [UInt8](repeating: 0, count: 4096)
                _ = read(connection, &request, request.count)
                if let answer {
                    _ = answer.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
                    close(connection)
                } else {
                    while !stopped.value { usleep(20_000) }
                    close(connection)
                }
            }
        }.start()
    }

    /// Stops accepting and waits for the server's thread; the socket file stays (as a
    /// killed daemon leaves it). Once only.
    func stop() {
        guard !stopped.withLock({ was in defer { was = true }; return was }) else { return }
        done.wait()
    }
}
