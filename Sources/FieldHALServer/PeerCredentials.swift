import Foundation
import NIOCore
import NIOPosix
#if canImport(Glibc)
import Glibc
#endif

/// Who is at the other end of a Unix socket connection, as the kernel says (SO_PEERCRED,
/// SO_PEERGROUPS): not what the client claims. Taken when the connection was made.
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    /// The supplementary groups the peer had when it connected.
    public var groups: Set<UInt32>

    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: Set<UInt32>) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    /// Whether the peer is in `gid`, as its primary or a supplementary group.
    public func isMember(of gid: UInt32) -> Bool { self.gid == gid || groups.contains(gid) }

    /// The user's name, when the user database has one.
    public var userName: String? {
        guard let entry = getpwuid(uid_t(uid)) else { return nil }
        return String(cString: entry.pointee.pw_name)
    }

    #if os(Linux)
    /// Reads the peer of `channel`, a connected Unix socket.
    static func of(_ channel: any Channel) async throws -> PeerCredentials {
        guard let caller = try await future(of: channel).get() else { throw PeerCredentialsError.notASocket }
        return caller
    }

    /// The peer of `channel`, or nil when the kernel does not say (not a Unix socket). On the
    /// channel's event loop the answer is there at once: the gate decides before a byte is read.
    static func future(of channel: any Channel) -> EventLoopFuture<PeerCredentials?> {
        guard let provider = channel as? any SocketOptionProvider else { return channel.eventLoop.makeSucceededFuture(nil) }
        let level = NIOBSDSocket.OptionLevel(rawValue: SOL_SOCKET)
        let kernel: EventLoopFuture<KernelCredentials> = provider.unsafeGetSocketOption(
            level: level, name: NIOBSDSocket.Option(rawValue: KernelCredentials.option))
        return kernel.flatMap { credentials -> EventLoopFuture<PeerCredentials?> in
            // More than 64 groups: the kernel refuses (ERANGE) and the user database answers
            // instead (`groups(in:)` for the rest).
            let list: EventLoopFuture<SIMD64<UInt32>> = provider.unsafeGetSocketOption(
                level: level, name: NIOBSDSocket.Option(rawValue: KernelCredentials.groupsOption))
            return list.map(Self.groups(in:)).recover { _ in
                Self.databaseGroups(uid: credentials.uid, gid: credentials.gid)
            }.map { groups in
                PeerCredentials(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: groups)
            }
        }.recover { _ in nil }
    }

    /// The peer of `socket`, a connected Unix socket, read at once (the API's listener, before
    /// SwiftNIO has the connection); nil when the kernel does not say.
    init?(socket: Int32) {
        var credentials = KernelCredentials()
        var length = socklen_t(MemoryLayout<KernelCredentials>.size)
        guard getsockopt(socket, SOL_SOCKET, KernelCredentials.option, &credentials, &length) == 0 else { return nil }
        var list = SIMD64<UInt32>()
        length = socklen_t(MemoryLayout<SIMD64<UInt32>>.size)
        let groups = getsockopt(socket, SOL_SOCKET, KernelCredentials.groupsOption, &list, &length) == 0
            ? Self.groups(in: list) : Self.databaseGroups(uid: credentials.uid, gid: credentials.gid)
        self.init(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: groups)
    }

    /// SO_PEERGROUPS (Linux 4.13) fills as many gids as it has and zeroes the rest: gid 0
    /// cannot be told from padding, so membership of root's group counts by the primary
    /// gid only.
    private static func groups(in list: SIMD64<UInt32>) -> Set<UInt32> {
        var groups: Set<UInt32> = []
        for index in list.indices where list[index] != 0 { groups.insert(list[index]) }
        return groups
    }
    #endif

    private static func databaseGroups(uid: uid_t, gid: gid_t) -> Set<UInt32> {
        guard let entry = getpwuid(uid) else { return [] }
        var count: Int32 = 256
        var list = [gid_t](repeating: 0, count: Int(count))
        guard getgrouplist(entry.pointee.pw_name, gid, &list, &count) >= 0 else { return [] }
        return Set(list.prefix(Int(count)))
    }
}

/// `struct ucred` of <sys/socket.h>, which Glibc's module leaves out (it needs _GNU_SOURCE),
/// and the options' numbers from <asm-generic/socket.h>, the same on every Linux architecture
/// Swift runs on.
struct KernelCredentials {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0

    static let option: Int32 = 17  // SO_PEERCRED
    static let groupsOption: Int32 = 59  // SO_PEERGROUPS
}

enum PeerCredentialsError: Error, CustomStringConvertible {
    case notASocket

    var description: String { "the connection is not a Unix socket: no peer credentials" }
}
