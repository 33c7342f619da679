import FieldHAL
import FieldHALPluginProtocol
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Serves one `PluginDescriptor` as an external plugin process: the plugin side of
/// docs/plugin-protocol.md, on standard input and output.
///
/// A plugin executable in Swift is this, with its descriptor:
///
/// ```swift
/// let status = await PluginServer(MyPlugin.descriptor, version: "1.0.0").serve()
/// exit(status)
/// ```
///
/// What it serves: the handshake (the descriptor's name and capabilities), `open` with the
/// section's parameters (checked against the descriptor's specs here too; each capability
/// once, several in one process since 1.2) and `close`, location
/// (`gps.watch`, `gps.fix`, `gps.lost`), NFC (`nfc.read`, `nfc.write`, `nfc.emulate`),
/// haptics (`haptics.play`), biometrics (`biometrics.availability`, `biometrics.verify`,
/// `biometrics.enroll` with its stages as `$/progress`), `$/cancel`, `shutdown` and
/// `exit`, and the end of standard input. A failed request answers with the
/// `FieldHALError` in `data`, so the host reports the same typed error, advice and all.
/// Other capabilities' methods are not in the protocol yet: their `open` answers
/// `unsupported`.
///
/// Threads: standard input is read on a thread of its own (`DeviceThread`), never on
/// Swift's cooperative pool. A message is written at once, without waiting, by whoever
/// sends it (a fix on the receiver's thread); what the socket cannot take at once is
/// written by a writer thread that waits for room.
public final class PluginServer: Sendable {
    public let descriptor: PluginDescriptor
    /// The name the plugin says in `initialize`: its manifest's name.
    public let name: String
    public let version: String
    private let input: Int32
    private let output: Int32
    private let writer = DeviceThread(name: "plugin output")
    private let outbox = LockedValue(Outbox())
    private let state = LockedValue(State())

    private struct State {
        /// What the host opened: one device per capability (since 1.2 a process may serve
        /// several, e.g. an NFC chip's reader and emulator sharing one device).
        var opened: [Capability: CapabilityProvider] = [:]
        /// Running requests (for `$/cancel`, and for `close` of the capability they use)
        /// and streams, by the request's id.
        var requests: [Int64: (capability: Capability?, task: Task<Void, Never>)] = [:]
        var streams: [Int64: Subscription] = [:]
    }

    /// `name` defaults to the descriptor's; `input` and `output` to standard input and output.
    public init(_ descriptor: PluginDescriptor, name: String? = nil, version: String, input: Int32 = 0, output: Int32 = 1) {
        self.descriptor = descriptor
        self.name = name ?? descriptor.name
        self.version = version
        self.input = input
        self.output = output
    }

    /// Serves until `exit` or the end of the input; returns the process's exit status
    /// (0, or 1 when the host sent something that is not the protocol).
    public func serve() async -> Int32 {
        let messages = AsyncStream<LineReader.Line>.makeStream()
        let reader = DeviceThread(name: "plugin input")
        reader.submit { [input] in
            var lines = LineReader(descriptor: input, limit: PluginProtocol.maximumMessage)
            while let line = lines.next() {
                messages.continuation.yield(line)
                if case .tooLong = line { break }
            }
            messages.continuation.finish()
        }
        defer { reader.stop() }
        var status: Int32 = 0
        reading: for await line in messages.stream {
            switch line {
            case .tooLong:
                FileHandle.standardError.write(Data("\(name): a message over \(PluginProtocol.maximumMessage) bytes from the host\n".utf8))
                status = 1
                break reading
            case .text(let bytes):
                guard let message = PluginProtocol.message(bytes) else {
                    FileHandle.standardError.write(Data("\(name): the host sent something that is not JSON-RPC 2.0\n".utf8))
                    status = 1
                    break reading
                }
                if await handle(message) == .exit { break reading }
            }
        }
        await shutDown()
        writer.stop()
        return status
    }

    private enum Next { case goOn, exit }

    private func handle(_ message: JSONValue) async -> Next {
        guard let method = message["method"]?.string else { return .goOn }  // a response: the host asks, it never answers
        let parameters = message["params"] ?? .object([:])
        guard let id = message["id"], id != .null else {
            switch method {
            case "exit": return .exit
            case "$/cancel":
                if let cancelled = parameters["id"]?.integer { cancel(cancelled) }
            default: break  // notifications not known are ignored
            }
            return .goOn
        }
        switch method {
        case "initialize":
            let capabilities = descriptor.capabilities.keys.sorted().map { JSONValue.string($0.rawValue) }
            send(PluginProtocol.response(id, result: .object([
                "name": .string(name), "version": .string(version),
                "protocol": PluginProtocol.version.json,
                "capabilities": .array(capabilities)])))
        case "open":
            track(id) { [self] in await open(id, parameters) }
        case "close":
            track(id) { [self] in await close(id, parameters) }
        case "gps.watch":
            watchLocation(id)
        case PluginProtocol.NFCMethod.read, PluginProtocol.NFCMethod.write, PluginProtocol.NFCMethod.emulate:
            track(id, on: method == PluginProtocol.NFCMethod.emulate ? .nfcEmulator : .nfcReader) { [self] in await nfc(method, id, parameters) }
        case PluginProtocol.HapticsMethod.play:
            track(id, on: .haptics) { [self] in await playHaptics(id, parameters) }
        case PluginProtocol.BiometricsMethod.availability, PluginProtocol.BiometricsMethod.verify, PluginProtocol.BiometricsMethod.enroll:
            track(id, on: .biometrics) { [self] in await biometrics(method, id, parameters) }
        case "shutdown":
            await shutDown()
            send(PluginProtocol.response(id, result: .null))
        default:
            send(PluginProtocol.response(id, code: -32601, message: "method not found: \(method)"))
        }
        return .goOn
    }

    /// Runs a request in a task of its own, so that `$/cancel` can reach it and the input
    /// is read on meanwhile.
    private func track(_ id: JSONValue, on capability: Capability? = nil, _ work: @escaping @Sendable () async -> Void) {
        guard let number = id.integer else {
            Task { await work() }
            return
        }
        // Made under the lock, so that a request that ends at once finds itself there to
        // remove (else its entry would outlive it).
        state.withLock { state in
            state.requests[number] = (capability, Task { [state = self.state] in
                await work()
                state.withLock { _ = $0.requests.removeValue(forKey: number) }
            })
        }
    }

    private func cancel(_ id: Int64) {
        let (request, stream) = state.withLock { ($0.requests.removeValue(forKey: id), $0.streams.removeValue(forKey: id)) }
        request?.task.cancel()
        stream?.cancel()
    }

    private func open(_ id: JSONValue, _ parameters: JSONValue) async {
        do throws(FieldHALError) {
            guard let capabilityName = parameters["capability"]?.string, let capability = Capability(rawValue: capabilityName) else {
                throw FieldHALError(.invalidArgument, subject: name, detail: "open without a capability this plugin knows")
            }
            guard let specs = descriptor.capabilities[capability] else {
                throw FieldHALError(.unsupported, subject: name, detail: "does not provide \(capability)")
            }
            guard [.location, .nfcReader, .nfcEmulator, .haptics, .biometrics].contains(capability) else {
                throw FieldHALError(.unsupported, subject: "\(capability) plugin \(name)",
                                    detail: "\(capability) through the plugin protocol is not in protocol \(PluginProtocol.version) yet",
                                    advice: "use the built-in plugin in process")
            }
            guard state.withLock({ $0.opened[capability] == nil }) else {
                throw FieldHALError(.busy, subject: name, detail: "\(capability) is already open in this process",
                                    advice: "close it first (the host's close)")
            }
            // The host checked the section against the manifest; the plugin checks again,
            // since a manifest and its executable can disagree.
            let values = (parameters["parameters"]?.object ?? [:]).compactMapValues(ConfigValue.init)
            let checked: PluginParameters
            do {
                checked = try PluginParameters.checked(values, against: specs, section: capability.rawValue, source: "open from the host")
            } catch {
                throw FieldHALError(.invalidArgument, subject: "plugin \(name)", detail: "\(error)",
                                    advice: "the plugin's manifest and its executable disagree on [\(capability)]'s parameters")
            }
            let provider: CapabilityProvider
            do {
                provider = try await descriptor.open(capability, checked,
                                                     PluginContext(configDirectory: FileManager.default.currentDirectoryPath,
                                                                   stateDirectory: FileManager.default.currentDirectoryPath))
            } catch let error as FieldHALError {
                throw error
            } catch {
                throw FieldHALError(.unavailable, subject: name, detail: "\(error)")
            }
            if Task.isCancelled {
                await provider.device.close()
                throw FieldHALError.cancelled(name)
            }
            state.withLock { $0.opened[capability] = provider }
            send(PluginProtocol.response(id, result: .object(["device": .string(provider.device.deviceName)])))
        } catch {
            send(PluginProtocol.response(id, error: error))
        }
    }

    /// `close` (1.2): releases one capability's device; the others stay open. Requests
    /// still running on it are cancelled first (each answers `cancelled`).
    private func close(_ id: JSONValue, _ parameters: JSONValue) async {
        await answer(id) { [self] in
            guard let capability = parameters["capability"]?.string.flatMap(Capability.init(rawValue:)) else {
                throw FieldHALError(.invalidArgument, subject: name, detail: "close without a capability")
            }
            let (provider, running) = state.withLock { state in
                let running = state.requests.filter { $0.value.capability == capability }
                for id in running.keys { state.requests.removeValue(forKey: id) }
                return (state.opened.removeValue(forKey: capability), running.values.map(\.task))
            }
            guard let provider else {
                throw FieldHALError(.notConfigured, subject: name, detail: "close of \(capability), which is not open")
            }
            // Its running requests end first (each answers `cancelled`), then the device closes.
            for task in running { task.cancel() }
            for task in running { await task.value }
            await provider.device.close()
            return .null
        }
    }

    /// `gps.watch`: the stream's number is the request's id; every fix the provider hands
    /// over is a `gps.fix`, a source it lost a `gps.lost`.
    private func watchLocation(_ id: JSONValue) {
        guard case .location(let location)? = state.value.opened[.location], let number = id.integer else {
            send(PluginProtocol.response(id, error: FieldHALError(.notConfigured, subject: name, detail: "gps.watch before gps is open")))
            return
        }
        send(PluginProtocol.response(id, result: .object(["stream": .integer(number)])))
        let subscription = location.follow({ [self] fix in
            if fix.mode == .noFix, let problem = fix.sourceProblem {
                send(PluginProtocol.notification("gps.lost", .object(["stream": .integer(number), "reason": .string(problem)])))
            } else {
                send(PluginProtocol.notification("gps.fix", .object(["stream": .integer(number), "fix": PluginProtocol.value(of: fix)])))
            }
        }, end: { [self] error in
            let reason = error.map { "\($0)" } ?? "the receiver's stream ended"
            send(PluginProtocol.notification("gps.lost", .object(["stream": .integer(number), "reason": .string(reason)])))
        })
        state.withLock { $0.streams[number] = subscription }
    }

    /// `nfc.read`, `nfc.write`, `nfc.emulate`: one operation of the open reader or emulator,
    /// answered with its tag or outcome, or its typed error. `$/cancel` cancels the task
    /// it runs in, and with it the device's wait.
    private func nfc(_ method: String, _ id: JSONValue, _ parameters: JSONValue) async {
        let subject = "\(method) from the host"
        await answer(id) { [self] in
            let wanted: Capability = method == PluginProtocol.NFCMethod.emulate ? .nfcEmulator : .nfcReader
            switch (method, state.value.opened[wanted]) {
            case (PluginProtocol.NFCMethod.read, .nfcReader(let reader)?):
                let timeout = try PluginProtocol.timeout(in: parameters, subject: subject)
                return .object(["tag": try PluginProtocol.value(of: try await reader.readTag(timeout: timeout))])
            case (PluginProtocol.NFCMethod.write, .nfcReader(let reader)?):
                let timeout = try PluginProtocol.timeout(in: parameters, subject: subject)
                let message = try PluginProtocol.message(from: parameters["message"], subject: subject)
                return .object(["tag": try PluginProtocol.value(of: try await reader.write(message, timeout: timeout))])
            case (PluginProtocol.NFCMethod.emulate, .nfcEmulator(let emulator)?):
                let timeout = try PluginProtocol.timeout(in: parameters, subject: subject)
                let message = try PluginProtocol.message(from: parameters["message"], subject: subject)
                return PluginProtocol.value(of: try await emulator.emulate(message, timeout: timeout))
            default:
                throw FieldHALError(.notConfigured, subject: name, detail: "\(method) before \(wanted) is open")
            }
        }
    }

    /// `haptics.play`: the pattern, answered (null) when it has finished; `$/cancel` stops it.
    private func playHaptics(_ id: JSONValue, _ parameters: JSONValue) async {
        await answer(id) { [self] in
            guard case .haptics(let engine)? = state.value.opened[.haptics] else {
                throw FieldHALError(.notConfigured, subject: name, detail: "haptics.play before haptics is open")
            }
            try await engine.play(try PluginProtocol.pattern(from: parameters, subject: "haptics.play from the host"))
            return .null
        }
    }

    /// `biometrics.availability`, `biometrics.verify`, `biometrics.enroll`: one operation
    /// of the open sensor. An enrollment's stages are `$/progress` notifications, each sent
    /// as the sensor reports it, before the answer; `$/cancel` stops either wait.
    private func biometrics(_ method: String, _ id: JSONValue, _ parameters: JSONValue) async {
        let subject = "\(method) from the host"
        await answer(id) { [self] in
            guard case .biometrics(let sensor)? = state.value.opened[.biometrics] else {
                throw FieldHALError(.notConfigured, subject: name, detail: "\(method) before biometrics is open")
            }
            switch method {
            case PluginProtocol.BiometricsMethod.availability:
                return PluginProtocol.value(of: try await sensor.availability())
            case PluginProtocol.BiometricsMethod.verify:
                return PluginProtocol.value(of: try await sensor.verify(timeout: try PluginProtocol.timeout(in: parameters, subject: subject)))
            default:
                let finger = try PluginProtocol.finger(in: parameters, subject: subject)
                try await sensor.enroll(finger) { [self] stage in
                    send(PluginProtocol.notification(PluginProtocol.progress, .object(["id": id, "value": PluginProtocol.value(of: stage)])))
                }
                return .null
            }
        }
    }

    /// Runs a request's work and answers with its result, or its error typed as the host
    /// expects (a cancellation is `cancelled`; anything not a `FieldHALError` is `io`).
    private func answer(_ id: JSONValue, _ work: () async throws -> JSONValue) async {
        do {
            send(PluginProtocol.response(id, result: try await work()))
        } catch let error as FieldHALError {
            send(PluginProtocol.response(id, error: error))
        } catch is CancellationError {
            send(PluginProtocol.response(id, error: FieldHALError.cancelled(name)))
        } catch {
            send(PluginProtocol.response(id, error: FieldHALError(.io, subject: name, detail: "\(error)")))
        }
    }

    /// Ends the streams and running requests and releases the device (`shutdown`, `exit`,
    /// the end of the input). Safe to call twice.
    private func shutDown() async {
        let (requests, streams, opened) = state.withLock { state in
            defer { state.requests = [:]; state.streams = [:]; state.opened = [:] }
            return (Array(state.requests.values), Array(state.streams.values), Array(state.opened.values))
        }
        for stream in streams { stream.cancel() }
        for request in requests { request.task.cancel() }
        for request in requests { await request.task.value }
        for provider in opened { await provider.device.close() }
    }

    /// What is still to be written, in order, and whether the host has gone.
    private struct Outbox {
        var queued: [UInt8] = []
        var broken = false
    }

    private enum Sent {
        case all
        case part(ArraySlice<UInt8>)
        case broken
    }

    /// Writes a message. The caller's thread writes it at once when the socket takes it
    /// (never waiting: a fix goes out from the receiver's thread with no hop); what the
    /// socket cannot take now is queued for the writer thread, which waits for room. One
    /// lock keeps messages whole and in order. Once the host has gone (EPIPE), the rest is
    /// dropped: the end of the input follows.
    private func send(_ bytes: [UInt8]) {
        let wakeWriter = outbox.withLock { box -> Bool in
            guard !box.broken else { return false }
            guard box.queued.isEmpty else {
                box.queued += bytes  // the writer is on it
                return false
            }
            switch write(bytes[...]) {
            case .all: return false
            case .broken: box.broken = true; return false
            case .part(let rest): box.queued = Array(rest); return true
            }
        }
        if wakeWriter { writer.submit { [self] in flushQueued() } }
    }

    /// On the writer thread: waits for room and writes until nothing is queued.
    private func flushQueued() {
        while true {
            let done = outbox.withLock { box -> Bool in
                guard !box.broken, !box.queued.isEmpty else { return true }
                switch write(box.queued[...]) {
                case .all: box.queued = []; return true
                case .broken: box.broken = true; box.queued = []; return true
                case .part(let rest): box.queued = Array(rest); return false
                }
            }
            if done { return }
            var room = pollfd(fd: output, events: Int16(POLLOUT), revents: 0)
            _ = poll(&room, 1, 1000)
        }
    }

    /// As much of `bytes` as the output takes without waiting.
    private func write(_ bytes: ArraySlice<UInt8>) -> Sent {
        var rest = bytes
        while !rest.isEmpty {
            let written = rest.withUnsafeBytes { Glibc.send(output, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            if written > 0 { rest = rest.dropFirst(written); continue }
            if written < 0 && errno == EINTR { continue }
            if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return .part(rest) }
            if written < 0 && errno == ENOTSOCK {
                // Not a socket: run by hand, its output a terminal or a pipe. A plain write.
                let plain = rest.withUnsafeBytes { Glibc.write(output, $0.baseAddress, $0.count) }
                if plain > 0 { rest = rest.dropFirst(plain); continue }
                if plain < 0 && errno == EINTR { continue }
            }
            return .broken
        }
        return .all
    }
}

/// Lines from a descriptor with blocking reads, each at most `limit` bytes.
struct LineReader {
    enum Line: Sendable {
        case text([UInt8])
        case tooLong
    }

    let descriptor: Int32
    let limit: Int
    private var buffered: [UInt8] = []
    private var ended = false
    /// Where each read lands: made once, not per line.
    private var chunk = [UInt8](repeating: 0, count: 65536)

    init(descriptor: Int32, limit: Int) {
        self.descriptor = descriptor
        self.limit = limit
    }

    /// The next non-empty line, `.tooLong`, or nil at the end of the input.
    mutating func next() -> Line? {
        while true {
            if let newline = buffered.firstIndex(of: 10) {
                let line = Array(buffered[..<newline])
                buffered.removeSubrange(...newline)
                if line.allSatisfy({ $0 == 32 || $0 == 13 || $0 == 9 }) { continue }
                return line.count > limit ? .tooLong : .text(line)
            }
            if buffered.count > limit { return .tooLong }
            if ended { return nil }
            let count = read(descriptor, &chunk, chunk.count)
            if count > 0 { buffered += chunk[..<count]; continue }
            if count < 0 && errno == EINTR { continue }
            ended = true  // the end of the input, or the host gone: a last line without a newline is dropped
        }
    }
}
