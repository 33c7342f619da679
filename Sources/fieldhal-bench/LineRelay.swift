import FieldHAL
import FieldHALComposition
import Foundation
import FieldHALCommandLine
#if canImport(Glibc)
import Glibc
#endif

/// A one-way line relay for benchmarks: it watches an upstream gpsd, stamps each line the
/// moment it forwards it, and writes it to every client at once. Both clients under test
/// (gpspipe and FieldHAL's plugin) then see the same bytes at the same instant, and the
/// stamp is "when gpsd's report reached them" for both. Clients' commands are read and
/// ignored: the relay has already asked gpsd for JSON.
final class LineRelay: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let upstream: Int32
    private let lock = NSLock()
    private var clients: [Int32] = []
    private var stamps: [String: Double] = [:]
    private var finished = false
    /// Each TPV report to one client in turn (the others get every other line): the paths
    /// under test then never compete for the CPUs over the same report, and drift in the
    /// machine falls on all of them alike.
    private let oneClientPerReport: Bool

    init(upstreamPort: Int, oneClientPerReport: Bool = false) throws {
        self.oneClientPerReport = oneClientPerReport
        let gpsd = try TCP.connect(port: upstreamPort)
        let watch = #"?WATCH={"enable":true,"json":true};"# + "\n"
        _ = watch.withCString { send(gpsd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        upstream = gpsd
        (listener, port) = try TCP.listen()
    }

    /// Starts accepting clients and forwarding.
    func start() {
        Thread { [self] in acceptClients() }.start()
        Thread { [self] in forward() }.start()
    }

    var clientCount: Int { lock.withLock { clients.count } }
    var isFinished: Bool { lock.withLock { finished } }

    /// Returns when the feed is over: gpsd closed, or reports stopped coming for two seconds
    /// (or `limit` passed).
    func waitForTheFeedToEnd(within limit: Duration) async throws {
        let deadline = ContinuousClock.now + limit
        var lastCount = 0, lastChange = ContinuousClock.now
        while !isFinished, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            let count = forwardTimes.count
            if count != lastCount { lastCount = count; lastChange = .now }
            if count > 0, ContinuousClock.now - lastChange > .seconds(2) { break }
        }
    }

    /// Forwarding times (Unix seconds) of the TPV reports, by their `time` field.
    var forwardTimes: [String: Double] { lock.withLock { stamps } }

    private func acceptClients() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 { return }
            lock.withLock { clients.append(client) }
            Thread { var sink = [UInt8](repeating: 0, count: 512); while recv(client, &sink, sink.count, 0) > 0 {} }.start()
        }
    }

    private func forward() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var pending: [UInt8] = []
        var lineNumber = 0
        var reports = 0
        while true {
            let count = recv(upstream, &buffer, buffer.count, 0)
            if count <= 0 { break }
            pending += buffer[0..<count]
            while let newline = pending.firstIndex(of: 10) {
                let line = Array(pending[...newline])
                pending.removeSubrange(...newline)
                let now = Date().timeIntervalSince1970
                // Alternate who is written first, so neither client is always second.
                lineNumber += 1
                let connected = lock.withLock { clients }
                var targets = lineNumber % 2 == 0 ? connected : connected.reversed()
                let key = TPVKey.of(String(decoding: line, as: UTF8.self))
                if key != nil, oneClientPerReport, !connected.isEmpty {
                    targets = [connected[reports % connected.count]]
                    reports += 1
                }
                for client in targets { _ = line.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } }
                if let key {
                    lock.withLock { stamps[key] = stamps[key] ?? now }
                }
            }
        }
        lock.withLock {
            finished = true
            for client in clients { shutdown(client, Int32(SHUT_RDWR)); close(client) }
        }
        shutdown(listener, Int32(SHUT_RDWR))
    }
}

/// The key that matches one TPV report across observers: its `time` field.
enum TPVKey {
    static func of(_ line: String) -> String? {
        guard line.contains(#""class":"TPV""#), let start = line.range(of: #""time":""#),
              let end = line[start.upperBound...].firstIndex(of: "\"") else { return nil }
        return String(line[start.upperBound..<end])
    }

    /// gpsd's rendering of a fix time: `2026-03-15T12:00:00.000Z`.
    static func of(_ date: Date) -> String {
        style.format(date)
    }

    /// Made once: a formatter made per fix loaded the machine the benchmarks measure.
    private static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
}

/// Blocking TCP on 127.0.0.1, for the benchmark's own plumbing.
enum TCP {
    static func connect(port: Int) throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = loopback(port: port)
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard descriptor >= 0, status == 0 else {
            close(descriptor)
            throw FieldHALError(.unavailable, subject: "bench", detail: "cannot connect to 127.0.0.1:\(port)")
        }
        return descriptor
    }

    static func listen() throws -> (Int32, Int) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard descriptor >= 0, bound, Glibc.listen(descriptor, 8) == 0 else {
            throw FieldHALError(.io, subject: "bench", detail: "cannot listen on 127.0.0.1")
        }
        return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
    }

    static func freePort() throws -> Int {
        let (descriptor, port) = try listen()
        close(descriptor)
        return port
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return address
    }
}
