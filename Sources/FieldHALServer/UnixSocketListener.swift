import Dispatch
import FieldHAL
import FieldHALSystem
import Foundation
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The API's Unix socket, accepted here and each connection handed to SwiftNIO through its
/// own API for an already connected socket (`ClientBootstrap.withConnectedSocket`).
///
/// Why not SwiftNIO's server bootstrap: an event stream writes a fix straight to its
/// connection from the thread that has it (`EventStreamSocket`), and for that it needs the
/// connection's descriptor, which SwiftNIO never hands out. Accepting here, the listener
/// keeps a duplicate of each descriptor it gives SwiftNIO (`AdoptedConnections`), so no
/// descriptor is ever looked for behind the framework's back. The HTTP pipeline, the
/// caller gate and the routes are the same as the web door's, which SwiftNIO accepts.
///
/// One thread waits in `poll` for connections and a wake-up; each connection costs one hop
/// to the event loop, as a connection accepted by SwiftNIO on another loop would.
final class UnixSocketListener: Sendable {
    /// What `accept` got, in the order it got them; finished when the listener stops.
    private let accepted: AsyncStream<GatedHTTP1Channel.Connection>
    private let sink: AsyncStream<GatedHTTP1Channel.Connection>.Continuation
    private let listening: Int32
    private let wakeup: WakeupEvent
    private let stopped = Mutex(false)

    /// Binds and listens on `path` (which `APIServer.claim` made free), readable and
    /// writable by everyone: callers are told apart by their credentials, per request.
    init(path: String, backlog: Int32) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw FieldHALError(.io, subject: path, detail: "socket(): \(SystemError.describe())") }
        do {
            var address = try Self.address(path)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard bound == 0 else {
                throw FieldHALError(.io, subject: path, detail: "bind(): \(SystemError.describe())",
                                    advice: "check that the socket's directory exists and the daemon may write to it")
            }
            guard listen(fd, backlog) == 0 else { throw FieldHALError(.io, subject: path, detail: "listen(): \(SystemError.describe())") }
            chmod(path, 0o666)
            wakeup = try WakeupEvent()
        } catch {
            close(fd)
            throw error
        }
        listening = fd
        (accepted, sink) = AsyncStream.makeStream(of: GatedHTTP1Channel.Connection.self)
    }

    deinit { close(listening) }

    /// `path` as a socket address, or why it cannot be one.
    static func address(_ path: String) throws -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw FieldHALError(.invalidArgument, subject: path, detail: "longer than a Unix socket path may be (107 bytes)",
                                advice: "set [api] socket to a shorter path")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        return address
    }

    /// Serves connections through `gate` on `eventLoop` until the task is cancelled; each
    /// connection's handler runs in a child task, cancelled with the listener.
    func serve(_ gate: GatedHTTP1Channel, on eventLoop: any EventLoop, adopted: AdoptedConnections, logger: Logger) async {
        let handOver = HandOver(gate: gate, eventLoop: eventLoop, adopted: adopted, sink: sink, logger: logger)
        let thread = Thread { [self] in acceptUntilStopped(handOver) }
        thread.name = "fieldhal-api"
        thread.start()
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                for await connection in accepted {
                    group.addTask { await gate.handle(value: connection, logger: logger) }
                }
            }
        } onCancel: {
            stop()
        }
    }

    private func stop() {
        stopped.withLock { $0 = true }
        wakeup.signal()
        sink.finish()
    }

    /// The accepting thread: every connection the kernel has queued, then `poll` again.
    private func acceptUntilStopped(_ handOver: HandOver) {
        let logger = handOver.logger
        var entries = [pollfd(fd: listening, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0)]
        while !stopped.withLock({ $0 }) {
            if case .failure(let code) = SystemCall.poll(&entries, timeout: nil) {
                logger.error("api: poll() on the socket: \(code.description)")
                return
            }
            // What the kernel has queued, taken in one go and handed to the event loop in
            // one wake-up: under a reconnect storm, a wake-up per connection would be most
            // of the loop's work (docs/decisions.md, "The API is served on one event loop").
            var batch: [(connection: Int32, admission: GatedHTTP1Channel.Admission)] = []
            while batch.count < Self.batchLimit, !stopped.withLock({ $0 }) {
                let accepted = Self.accept(listening)
                if case .success(let connection) = accepted {
                    // The gate's decision first, here: a connection over its caller's share
                    // is closed before SwiftNIO ever sees it, so a storm of them costs the
                    // event loop nothing.
                    let admission = handOver.gate.admit(PeerCredentials(socket: connection), handOver.gate.ledger)
                    if case .dropped = admission {
                        close(connection)
                    } else {
                        batch.append((connection, admission))
                    }
                    continue
                }
                guard case .failure(let code) = accepted else { break }
                switch code {
                case .connectionAbort: continue
                case .tooManyOpenFiles, .tooManyOpenFilesInSystem, .noBufferSpace, .noMemory:
                    // Out of descriptors: the queued connections wait in the kernel's
                    // backlog until some close, rather than spinning on a socket that stays readable.
                    logger.warning("api: accept(): \(SystemError.describe(code.rawValue))")
                    _ = wakeup.wait(upTo: .milliseconds(50))
                default: break
                }
                break
            }
            if !batch.isEmpty {
                // Nothing more is accepted until the loop has taken these: what it has not
                // got to waits in the kernel's backlog, as with SwiftNIO's own accepting, and
                // a storm cannot queue up work ahead of a granted client's bytes.
                let taken = batch, done = DispatchSemaphore(value: 0)
                handOver.eventLoop.execute {
                    for (connection, admission) in taken { handOver(connection, admission) }
                    done.signal()
                }
                done.wait()
            }
        }
        drain()
    }

    /// A connection, close-on-exec and non-blocking as SwiftNIO wants it, or `accept`'s errno
    /// (an interruption retried). (Glibc's Swift module leaves `accept4` out. Between the two calls a
    /// program started by another thread could inherit it, but the daemon starts its
    /// children through `ChildProcess`, which closes every descriptor from 3 on in the child.)
    private static func accept(_ listening: Int32) -> Result<Int32, Errno> {
        SystemCall.attempt { Glibc.accept(listening, nil, nil) }.map { connection in
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            _ = fcntl(connection, F_SETFL, fcntl(connection, F_GETFL) | O_NONBLOCK)
            return connection
        }
    }

    /// At most this many connections go to the event loop in one wake-up.
    static let batchLimit = 64

    /// Connections queued when the listener stopped are refused, not left open.
    private func drain() {
        while case .success(let connection) = Self.accept(listening) {
            close(connection)
        }
    }

    /// What each accepted connection goes through: SwiftNIO takes it on `eventLoop`, the
    /// gate decides, and the listener keeps a duplicate for the event streams.
    private struct HandOver: Sendable {
        let gate: GatedHTTP1Channel
        let eventLoop: any EventLoop
        let adopted: AdoptedConnections
        let sink: AsyncStream<GatedHTTP1Channel.Connection>.Continuation
        let logger: Logger

        func callAsFunction(_ connection: Int32, _ admission: GatedHTTP1Channel.Admission) {
            let held = HeldDescriptor(fcntl(connection, F_DUPFD_CLOEXEC, 3))
            let gate = self.gate, adopted = self.adopted, sink = self.sink, logger = self.logger
            let setUp = LockedValue(false)
            ClientBootstrap(group: eventLoop)
                .channelOption(.allowRemoteHalfClosure, value: true)
                .channelInitializer { channel in
                    setUp.withLock { $0 = true }
                    adopted.adopt(channel, held)
                    return gate.setup(channel: channel, admission: admission, logger: logger).map { connection in
                        // The listener has stopped: no handler will take it.
                        if case .terminated = sink.yield(connection) { channel.close(promise: nil) }
                    }
                }
                .withConnectedSocket(connection)
                // A connection gone before it was set up: SwiftNIO closed it; the duplicate
                // goes with it, and the caller's share is given back.
                .whenFailure { _ in
                    held.close()
                    if !setUp.value { admission.giveBack(to: gate.ledger) }
                }
        }
    }
}

/// One duplicate of a connection's descriptor, closed once: by whoever takes it, or when
/// the connection closes.
final class HeldDescriptor: Sendable {
    private let descriptor: Mutex<Int32>

    init(_ descriptor: Int32) { self.descriptor = Mutex(descriptor) }

    deinit { close() }

    /// The descriptor, now the caller's to close; nil when it was taken or closed.
    func take() -> Int32? {
        descriptor.withLock { held in
            defer { held = -1 }
            return held >= 0 ? held : nil
        }
    }

    func close() {
        if let fd = take() { _ = Glibc.close(fd) }
    }
}

/// The listener's duplicate of each connection it handed to SwiftNIO, by channel, for as
/// long as the connection is open.
final class AdoptedConnections: Sendable {
    private let held = Mutex<[ObjectIdentifier: HeldDescriptor]>([:])

    func adopt(_ channel: any Channel, _ descriptor: HeldDescriptor) {
        held.withLock { $0[ObjectIdentifier(channel)] = descriptor }
        channel.closeFuture.whenComplete { [self] _ in
            held.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }?.close()
        }
    }

    /// The duplicate of `channel`'s descriptor, now the caller's; nil when the channel was
    /// not accepted by the listener (the web door's) or it was taken already.
    func take(_ channel: any Channel) -> Int32? {
        held.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }?.take()
    }

    var count: Int { held.withLock { $0.count } }
}
