import FieldHAL
import FieldHALPluginProtocol
import FieldHALProcess
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One running plugin process and its JSON-RPC channel (docs/plugin-protocol.md).
///
/// Blocking: every call runs on one thread of the caller's (a `DeviceThread`), waits in
/// `poll` with a deadline beside the process's exit and a `WakeupEvent`, and never waits
/// longer than it was told. What the plugin writes on standard error is kept (its last
/// 4 KiB) to quote when it fails.
public final class PluginProcess {
    public let manifest: PluginManifest
    private let child: ChildProcess
    private let wakeup: WakeupEvent
    private var nextIdentifier: Int64 = 1
    private var received: [UInt8] = []
    /// Descriptors that came with the bytes, waiting for the message that names them.
    private var receivedDescriptors: [OwnedDescriptor] = []
    /// Where each read lands: made once, not per message (a fix is one read).
    private var chunk = [UInt8](repeating: 0, count: 65536)
    private var errorTail: [UInt8] = []
    private var errorsOpen = true
    private var subject: String { "plugin \(manifest.name)" }

    /// Starts the manifest's executable in the manifest's directory. `wakeup`, when
    /// signalled from another thread, ends the wait in progress with `cancelled`.
    public init(_ manifest: PluginManifest, wakeup: WakeupEvent, environment: [String: String] = [:]) throws(FieldHALError) {
        self.manifest = manifest
        self.wakeup = wakeup
        guard access(manifest.executable, X_OK) == 0 else {
            let missing = errno == ENOENT
            throw FieldHALError(.unavailable, subject: "plugin \(manifest.name)",
                                detail: missing ? "\(manifest.executable) is missing" : "\(manifest.executable) is not executable",
                                advice: missing ? "install the plugin again, or correct \"executable\" in \(manifest.file)"
                                                : "chmod +x \(manifest.executable)")
        }
        var variables = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        variables["FIELDHAL_PLUGIN_PROTOCOL"] = PluginProtocol.version.description
        // The program is trusted as code before it runs (PluginTrust): checked here rather
        // than when the manifest is read, so that a missing one still gets the advice above.
        // The resolved path is what runs: a symlink changed after the check changes nothing.
        let program = try PluginTrust.check(manifest.executable, what: "plugin program")
        do {
            child = try ChildProcess(program, [], environment: variables, errors: .pipe, connection: true,
                                     workingDirectory: (manifest.executable as NSString).deletingLastPathComponent)
        } catch {
            throw FieldHALError(.unavailable, subject: "plugin \(manifest.name)", detail: "cannot start \(manifest.executable): \(error)")
        }
    }

    /// The process's id, for logs.
    public var pid: Int32 { child.pid }

    /// The last lines the plugin wrote on standard error, for an error message.
    public var standardErrorTail: String {
        drainErrors()
        let text = String(decoding: errorTail, as: UTF8.self)
        return text.split(separator: "\n").suffix(5).joined(separator: " | ")
    }

    /// What ended a wait on the channel.
    public enum Event {
        /// A whole message arrived, with the descriptors it names (`"fds"`).
        case message(JSONValue, [OwnedDescriptor])
        /// The socket can take more of what is queued.
        case writable
        /// The wake-up was signalled.
        case woken
        /// The deadline passed.
        case deadline
    }

    /// Sends a request and waits for its answer: the `result`, or the plugin's error as a
    /// `FieldHALError` (its `data` carries the kind, advice…). The wake-up cancels it.
    public func call(_ method: String, _ parameters: JSONValue = .object([:]), timeout: Duration) throws(FieldHALError) -> JSONValue {
        let deadline = ContinuousClock.now + timeout
        let identifier = nextIdentifier
        nextIdentifier += 1
        try sendAll(PluginProtocol.request(identifier, method, parameters), deadline: deadline, doing: method, timeout: timeout)
        while true {
            switch try next(until: deadline, doing: method) {
            case .message(let message, _):
                guard let id = message["id"], id != .null else { continue }  // a notification: not ours to answer
                guard id == .integer(identifier) else {
                    throw failure(.protocolError, "answered request \(id) while \(method) (\(identifier)) was waiting")
                }
                return try result(of: message, method: method)
            case .woken:
                throw FieldHALError.cancelled(subject)
            case .deadline:
                throw hang(method, timeout)
            case .writable:
                continue
            }
        }
    }

    /// Sends a notification (no answer).
    public func notify(_ method: String, _ parameters: JSONValue = .object([:]), timeout: Duration) throws(FieldHALError) {
        try sendAll(PluginProtocol.notification(method, parameters), deadline: .now + timeout, doing: method, timeout: timeout)
    }

    /// `shutdown`, then `exit`, then up to `grace` for the process to end; killed after that
    /// or if it does not answer. Never throws: a plugin that will not stop is stopped.
    public func stop(grace: Duration = .seconds(2)) {
        if !child.hasExited {
            _ = try? call("shutdown", timeout: grace)
            try? notify("exit", timeout: grace)
            let deadline = ContinuousClock.now + grace
            while !child.hasExited, ContinuousClock.now < deadline {
                // With no pidfd (an old kernel) the exit is looked for every 20 ms.
                var entries = [pollfd(fd: child.exitDescriptor ?? -1, events: Int16(POLLIN), revents: 0)]
                _ = SystemCall.poll(&entries, timeout: child.exitDescriptor == nil ? .milliseconds(20) : ContinuousClock.now.duration(to: deadline))
            }
        }
        child.kill()
        child.waitForExit()
    }

    /// Whether the process has ended.
    public var hasExited: Bool { child.hasExited }

    /// Ends the process at once (SIGKILL), for a plugin that failed.
    public func kill() {
        child.kill()
        child.waitForExit()
    }

    // MARK: - Messages

    /// A response's result, or its error as a `FieldHALError`.
    public func result(of message: JSONValue, method: String) throws(FieldHALError) -> JSONValue {
        if let error = message["error"] { throw pluginError(error, method: method) }
        guard let result = message["result"] else {
            throw failure(.protocolError, "answered \(method) with neither a result nor an error")
        }
        return result
    }

    /// The error for a request the plugin left unanswered past its bound.
    public func hang(_ method: String, _ timeout: Duration) -> FieldHALError {
        FieldHALError(.timeout, subject: subject, detail: "no answer to \(method) within \(timeout)" + tailNote,
                      advice: "the plugin hangs: its author can say why; FieldHAL restarts it")
    }

    // MARK: - The channel

    /// Sends as much of `queue` as the socket takes now, without waiting (each message's
    /// descriptors with its first byte); what it does not take stays queued.
    public func send(_ queue: inout [OutgoingMessage], doing method: String) throws(FieldHALError) {
        switch PluginProtocol.write(&queue, to: child.connection!) {
        case .all: return
        case .wouldBlock:
            if child.hasExited { throw exited(during: method) }
        case .failed(let code):
            if child.hasExited { throw exited(during: method) }
            throw failure(.disconnected, "stopped reading its input during \(method) (\(SystemError.describe(code)))")
        }
    }

    private func sendAll(_ bytes: [UInt8], deadline: ContinuousClock.Instant, doing method: String, timeout: Duration) throws(FieldHALError) {
        var rest = [OutgoingMessage(bytes)]
        while true {
            try send(&rest, doing: method)
            if rest.isEmpty { return }
            switch try next(until: deadline, doing: method, writing: true) {
            case .writable, .message: continue  // a message now is a notification; the caller's answer comes after its request
            case .woken: throw FieldHALError.cancelled(subject)
            case .deadline: throw hang(method, timeout)
            }
        }
    }

    /// Waits for the next event: a whole message (a line that is not a JSON-RPC object, or
    /// longer than the protocol allows, is the plugin's failure), room to write when
    /// `writing`, the wake-up, or the deadline. Throws when the process has ended.
    public func next(until deadline: ContinuousClock.Instant, doing method: String, writing: Bool = false) throws(FieldHALError) -> Event {
        while true {
            if let newline = received.firstIndex(of: 10) {
                let line = Array(received[..<newline])
                received.removeSubrange(...newline)
                if line.allSatisfy({ $0 == 32 || $0 == 13 || $0 == 9 }) { continue }
                guard let message = PluginProtocol.message(line) else {
                    let quoted = String(decoding: line.prefix(80), as: UTF8.self)
                    throw failure(.protocolError, "sent something that is not a JSON-RPC 2.0 message during \(method): \"\(quoted)\"")
                }
                guard let descriptors = PluginProtocol.take(for: message, from: &receivedDescriptors) else {
                    throw failure(.protocolError, "sent a message whose \"fds\" is \(PluginProtocol.descriptorCount(of: message)) with \(receivedDescriptors.count) descriptors beside it during \(method)")
                }
                return .message(message, descriptors)
            }
            guard received.count <= PluginProtocol.maximumMessage else {
                throw failure(.protocolError, "sent a message over \(PluginProtocol.maximumMessage) bytes during \(method)")
            }
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return .deadline }
            var entries = [pollfd(fd: child.connection!, events: Int16(POLLIN) | (writing ? Int16(POLLOUT) : 0), revents: 0),
                           pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: child.exitDescriptor ?? -1, events: Int16(POLLIN), revents: 0),
                           pollfd(fd: errorsOpen ? (child.standardError ?? -1) : -1, events: Int16(POLLIN), revents: 0)]
            let tick = child.exitDescriptor == nil ? min(left, .milliseconds(50)) : left
            try SystemCall.poll(&entries, timeout: tick, subject: subject)
            if entries[1].revents != 0 {
                wakeup.drain()
                return .woken
            }
            if entries[3].revents != 0 { drainErrors() }
            if writing && entries[0].revents & Int16(POLLOUT) != 0 { return .writable }
            let exitedNow = entries[2].revents != 0 || (child.exitDescriptor == nil && child.hasExited)
            guard entries[0].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 || exitedNow else { continue }
            // Read what is there first: a plugin's last words come before its exit.
            let got = chunk.withUnsafeMutableBytes { PluginProtocol.receive(from: child.connection!, into: $0, flags: Int32(MSG_DONTWAIT)) }
            let count = got.count
            guard PluginProtocol.accept(got, into: &receivedDescriptors) else {
                throw failure(.protocolError, "sent more descriptors than its messages name during \(method)")
            }
            if count > 0 { received += chunk[..<count]; continue }
            if count < 0 && errno == EAGAIN {  // (an interruption is retried by `receive`)
                // Woken by the exit, and a copy of the socket lives on in a child it left.
                if exitedNow && child.hasExited { throw exited(during: method) }
                continue
            }
            throw exited(during: method)
        }
    }

    private func drainErrors() {
        guard errorsOpen, let descriptor = child.standardError else { return }
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(descriptor, &chunk, chunk.count)
            if count > 0 {
                errorTail += chunk[..<count]
                if errorTail.count > 4096 { errorTail.removeFirst(errorTail.count - 4096) }
                continue
            }
            if count == 0 { errorsOpen = false }
            return
        }
    }

    private var tailNote: String {
        let tail = standardErrorTail
        return tail.isEmpty ? "" : "; its stderr ended: \(tail)"
    }

    private func exited(during method: String) -> FieldHALError {
        child.kill()
        child.waitForExit()
        let status = child.terminationStatus.map { $0 > 128 ? "killed by signal \($0 - 128)" : "exit status \($0)" } ?? "status unknown"
        return FieldHALError(.unavailable, subject: subject, detail: "the plugin process ended (\(status)) during \(method)" + tailNote,
                             advice: "run \(manifest.executable) by hand, or fieldhal plugin check \(manifest.file)")
    }

    /// An answer to a request the host did not send, or sent and had answered already:
    /// the plugin's `protocolError` (docs/plugin-protocol.md, Errors), whenever it comes.
    public func stray(_ id: JSONValue) -> FieldHALError {
        failure(.protocolError, "answered request \(String(decoding: id.jsonText, as: UTF8.self)), which the host did not send or had answered already")
    }

    private func failure(_ kind: FieldHALError.Kind, _ detail: String) -> FieldHALError {
        FieldHALError(kind, subject: subject, detail: detail + tailNote,
                      advice: "a fault in the plugin: fieldhal plugin check \(manifest.file) shows it; its author can fix it")
    }

    /// A JSON-RPC error from the plugin. Its `data` may carry a FieldHAL error's `kind`,
    /// `detail` and `advice`, which are kept; otherwise the plugin failed in its own way.
    private func pluginError(_ error: JSONValue, method: String) -> FieldHALError {
        let message = error["message"]?.string ?? "no message"
        let data = error["data"]
        if let typed = PluginProtocol.error(from: data, subject: subject, detail: message) { return typed }
        let code = error["code"]?.integer.map { " (\($0))" } ?? ""
        return FieldHALError(.protocolError, subject: subject, detail: "\(method) failed\(code): \(message)")
    }
}
