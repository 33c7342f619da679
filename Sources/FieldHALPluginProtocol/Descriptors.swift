import FieldHAL
import FieldHALSystem
import SystemPackage
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A file descriptor one side owns: closed when the last reference goes, unless taken.
/// Descriptors cross the channel beside messages (protocol 1.3, "Descriptors" in
/// docs/plugin-protocol.md): bulk bytes — a JPEG, PCM — travel in a sealed memfd, a
/// recording's output as a directory the receiver writes into, never inside JSON.
public final class OwnedDescriptor: Sendable {
    private let held: Mutex<Int32>

    public init(_ descriptor: Int32) {
        held = Mutex(descriptor)
    }

    /// The descriptor, still owned here (-1 once taken).
    public var descriptor: Int32 { held.withLock { $0 } }

    /// The descriptor, no longer owned here: the caller closes it.
    public func take() -> Int32 {
        held.withLock { descriptor in
            defer { descriptor = -1 }
            return descriptor
        }
    }

    deinit {
        let descriptor = held.withLock { $0 }
        if descriptor >= 0 { Glibc.close(descriptor) }
    }
}

/// A message and the descriptors that travel with it, as a side queues it to send.
public struct OutgoingMessage: Sendable {
    public var bytes: ArraySlice<UInt8>
    /// Sent with the message's first byte; closed here once sent (the receiver has its own).
    public var descriptors: [OwnedDescriptor]

    public init(_ bytes: [UInt8], descriptors: [OwnedDescriptor] = []) {
        self.bytes = bytes[...]
        self.descriptors = descriptors
    }
}

extension PluginProtocol {
    /// The most descriptors one message carries, and the most a side keeps waiting for the
    /// message that names them: a peer that sends more is at fault, not a reason to run
    /// out of descriptors.
    public static let descriptorsPerMessage = 4
    public static let descriptorsWaiting = 16

    /// How many descriptors a message says it carries: `"fds"` in its `params` (a request
    /// or a notification) or its `result` (an answer). 0 when it names none.
    public static func descriptorCount(of message: JSONValue) -> Int {
        let named = message["params"]?["fds"] ?? message["result"]?["fds"]
        return named?.integer.map { Int(clamping: $0) } ?? 0
    }

    /// Keeps what one read brought beside its bytes; false when the sender passed more than
    /// a message may carry, or left more waiting than any message names (its fault).
    public static func accept(_ received: Received, into waiting: inout [OwnedDescriptor]) -> Bool {
        waiting += received.descriptors
        return !received.truncated && waiting.count <= descriptorsWaiting
    }

    /// The descriptors `message` names, taken from the front of `waiting`; nil, taking
    /// none, when it names more than are waiting or than a message may carry.
    public static func take(for message: JSONValue, from waiting: inout [OwnedDescriptor]) -> [OwnedDescriptor]? {
        let named = descriptorCount(of: message)
        guard named <= waiting.count, named <= descriptorsPerMessage else { return nil }
        defer { waiting.removeFirst(named) }
        return Array(waiting.prefix(named))
    }

    /// What ended a write of queued messages.
    public enum WriteOutcome: Equatable {
        /// Everything is sent.
        case all
        /// The socket takes no more now; the rest stays queued.
        case wouldBlock
        /// The peer has gone, or the write failed: errno's value.
        case failed(Int32)
    }

    /// Writes queued messages, in order, without waiting: each message's descriptors go with
    /// its first byte (`sendmsg`, SCM_RIGHTS) and are closed here once sent. What the socket
    /// does not take stays in `queue`. A descriptor is never sent twice: a message whose
    /// first byte went out has none left.
    public static func write(_ queue: inout [OutgoingMessage], to socket: Int32) -> WriteOutcome {
        while let first = queue.first {
            if first.bytes.isEmpty {
                queue.removeFirst()
                continue
            }
            var sent = SystemCall.attempt { send(first.bytes, descriptors: first.descriptors.map(\.descriptor), on: socket) }
            if case .failure(.notSocket) = sent, first.descriptors.isEmpty {
                // Not a socket: a plugin run by hand, its output a terminal or a pipe.
                sent = SystemCall.attempt { first.bytes.withUnsafeBytes { Glibc.write(socket, $0.baseAddress, $0.count) } }
            }
            switch sent {
            case .success(let count) where count > 0:
                queue[0].descriptors = []  // the receiver has them now; ours close here
                queue[0].bytes = first.bytes.dropFirst(count)
                continue
            case .success: return .failed(EPIPE)
            case .failure(.resourceTemporarilyUnavailable): return .wouldBlock
            case .failure(let code): return .failed(code.rawValue)
            }
        }
        return .all
    }

    /// One `sendmsg`: the bytes, and the descriptors as SCM_RIGHTS when there are any.
    private static func send(_ bytes: ArraySlice<UInt8>, descriptors: [Int32], on socket: Int32) -> Int {
        bytes.withUnsafeBytes { buffer -> Int in
            var vector = iovec(iov_base: UnsafeMutableRawPointer(mutating: buffer.baseAddress), iov_len: buffer.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer -> Int in
                var header = msghdr()
                header.msg_iov = vectorPointer
                header.msg_iovlen = 1
                guard !descriptors.isEmpty else {
                    return Glibc.sendmsg(socket, &header, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
                }
                let space = controlSpace(descriptors.count)
                let control = UnsafeMutableRawPointer.allocate(byteCount: space, alignment: MemoryLayout<cmsghdr>.alignment)
                defer { control.deallocate() }
                control.initializeMemory(as: UInt8.self, repeating: 0, count: space)
                let entry = control.assumingMemoryBound(to: cmsghdr.self)
                entry.pointee.cmsg_level = SOL_SOCKET
                entry.pointee.cmsg_type = Int32(SCM_RIGHTS)
                entry.pointee.cmsg_len = MemoryLayout<cmsghdr>.stride + descriptors.count * MemoryLayout<Int32>.size
                let data = control.advanced(by: MemoryLayout<cmsghdr>.stride)
                for (index, descriptor) in descriptors.enumerated() {
                    data.storeBytes(of: descriptor, toByteOffset: index * MemoryLayout<Int32>.size, as: Int32.self)
                }
                header.msg_control = control
                header.msg_controllen = space
                return Glibc.sendmsg(socket, &header, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
        }
    }

    /// CMSG_SPACE for `count` descriptors.
    private static func controlSpace(_ count: Int) -> Int {
        let alignment = MemoryLayout<Int>.size
        let data = (count * MemoryLayout<Int32>.size + alignment - 1) / alignment * alignment
        return MemoryLayout<cmsghdr>.stride + data
    }

    /// What one read of the channel got.
    public struct Received {
        /// Bytes read: 0 at the end of the input, -1 with errno set.
        public var count: Int
        /// Descriptors that came with them (close-on-exec, owned by the caller).
        public var descriptors: [OwnedDescriptor]
        /// More descriptors came than a message may carry: they were closed by the kernel.
        public var truncated: Bool
    }

    /// One `recvmsg` into `buffer`, with any descriptors beside it. On something that is
    /// not a socket (a plugin run by hand on a pipe) a plain `read`.
    public static func receive(from socket: Int32, into buffer: UnsafeMutableRawBufferPointer, flags: Int32 = 0) -> Received {
        var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
        let space = controlSpace(descriptorsPerMessage)
        let control = UnsafeMutableRawPointer.allocate(byteCount: space, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0, count: space)
        var header = msghdr()
        // An interruption is retried here (the seam); any other failure is -1 with errno set.
        let outcome = withUnsafeMutablePointer(to: &vector) { vectorPointer -> Result<Int, Errno> in
            header.msg_iov = vectorPointer
            header.msg_iovlen = 1
            header.msg_control = control
            header.msg_controllen = space
            return SystemCall.attempt { Glibc.recvmsg(socket, &header, flags | Int32(MSG_CMSG_CLOEXEC)) }
        }
        let count: Int
        switch outcome {
        case .success(let got): count = got
        case .failure(.notSocket):
            // Not a socket: a plugin run by hand, its input a terminal or a pipe.
            let read = SystemCall.attempt { Glibc.read(socket, buffer.baseAddress, buffer.count) }
            return Received(count: (try? read.get()) ?? -1, descriptors: [], truncated: false)
        case .failure: return Received(count: -1, descriptors: [], truncated: false)
        }
        var descriptors: [OwnedDescriptor] = []
        var offset = 0
        let headerSize = MemoryLayout<cmsghdr>.stride
        while offset + headerSize <= header.msg_controllen {
            let entry = control.advanced(by: offset).assumingMemoryBound(to: cmsghdr.self).pointee
            guard entry.cmsg_len >= headerSize else { break }
            if entry.cmsg_level == SOL_SOCKET && entry.cmsg_type == Int32(SCM_RIGHTS) {
                let carried = (entry.cmsg_len - headerSize) / MemoryLayout<Int32>.size
                for index in 0..<carried {
                    let descriptor = control.loadUnaligned(fromByteOffset: offset + headerSize + index * MemoryLayout<Int32>.size, as: Int32.self)
                    descriptors.append(OwnedDescriptor(descriptor))
                }
            }
            offset += (entry.cmsg_len + MemoryLayout<Int>.size - 1) / MemoryLayout<Int>.size * MemoryLayout<Int>.size
        }
        return Received(count: count, descriptors: descriptors, truncated: header.msg_flags & Int32(MSG_CTRUNC) != 0)
    }
}
