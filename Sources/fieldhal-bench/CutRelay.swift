import FieldHAL
import FieldHALComposition
import FieldHALSystem
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on loopback that `bench seizure` cuts and restores: a kit's uplink going
/// down at t, as its uploads meet it — every open connection reset mid-transfer and every
/// new one refused — and coming back. Both directions are copied as they come, on a
/// thread per connection (blocking calls, never on the cooperative pool).
final class CutRelay: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let targetPort: Int
    private let lock = NSLock()
    private var isCut = false
    private var stopped = false
    /// Both ends of each connection being copied, for a cut to reset.
    private var open: [Int32] = []
    private(set) var refused = 0
    private(set) var reset = 0

    init(targetPort: Int) throws {
        self.targetPort = targetPort
        (listener, port) = try TCP.listen()
        Thread { [self] in accept() }.start()
    }

    /// The link goes down: open connections are reset, new ones refused.
    func cut() {
        lock.withLock {
            isCut = true
            reset += open.count / 2
            for descriptor in open { shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
    }

    func restore() { lock.withLock { isCut = false } }

    func stop() {
        lock.withLock {
            stopped = true
            for descriptor in open { shutdown(descriptor, Int32(SHUT_RDWR)) }
        }
        shutdown(listener, Int32(SHUT_RDWR))
    }

    private func accept() {
        while true {
            guard case .success(let client) = SystemCall.attempt({ Glibc.accept(listener, nil, nil) }) else {
                close(listener)
                return
            }
            let (down, done) = lock.withLock { (isCut, stopped) }
            if done { close(client); close(listener); return }
            guard !down, let server = try? TCP.connect(port: targetPort) else {
                // Refused as a dead link refuses: the connection ends before a byte.
                lock.withLock { refused += 1 }
                close(client)
                continue
            }
            lock.withLock { open += [client, server] }
            Thread { [self] in copy(client, server) }.start()
        }
    }

    /// Copies both ways until either side ends or a cut resets them, then closes both.
    private func copy(_ client: Int32, _ server: Int32) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var ends = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: server, events: Int16(POLLIN), revents: 0)]
        copying: while true {
            guard case .success = SystemCall.poll(&ends, timeout: .seconds(1)) else { break }
            for index in 0..<2 where ends[index].revents != 0 {
                let from = ends[index].fd, to = ends[1 - index].fd
                let count = buffer.withUnsafeMutableBytes { recv(from, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { break copying }
                var sent = 0
                while sent < count {
                    let wrote = buffer.withUnsafeBytes { send(to, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
                    guard wrote > 0 else { break copying }
                    sent += wrote
                }
            }
        }
        lock.withLock { open.removeAll { $0 == client || $0 == server } }
        close(client)
        close(server)
    }
}
