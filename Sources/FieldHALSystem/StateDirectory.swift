import FieldHAL
#if canImport(Glibc)
import Glibc
#endif

/// The directory where FieldHAL keeps state: the vault, queues, counters. Private to the
/// service user (mode 0700); every file in it is written with `AtomicFile`.
public struct StateDirectory: Sendable {
    public static let defaultPath = "/var/lib/fieldhal"
    public static let environmentVariable = "FIELDHAL_STATE_DIR"

    public let path: String

    public init(path: String) {
        self.path = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// The state directory by precedence: the command-line flag, then `FIELDHAL_STATE_DIR`,
    /// then the configuration's `kit.state_dir`, then `/var/lib/fieldhal`.
    public static func resolve(flag: String?, environment: [String: String], configured: String?) -> StateDirectory {
        StateDirectory(path: flag ?? environment[environmentVariable].flatMap { $0.isEmpty ? nil : $0 }
            ?? configured ?? defaultPath)
    }

    /// Creates the directory (and parents) if needed, mode 0700; an existing one must be this
    /// user's and closed to everyone else. Why: the vault, the lock's state and the evidence
    /// queue live here, and a directory another user owns or can enter could have its files
    /// swapped (an older lock state put back) or read.
    public func prepare() throws {
        try Self.makeDirectories(path, mode: 0o700)
        try Self.checkPrivate(path)
    }

    /// Refuses a directory not owned by the effective user, or open to its group or others,
    /// saying the command that fixes it.
    static func checkPrivate(_ path: String) throws {
        var info = stat()
        guard stat(path, &info) == 0 else { throw AtomicFileWriter.ioError(path, "inspect directory") }
        let me = geteuid()
        guard info.st_uid == me else {
            let owner = userName(info.st_uid)
            throw FieldHALError(.permissionDenied, subject: path,
                                detail: "the state directory belongs to \(owner), not to \(userName(me)) who runs this",
                                advice: "run as its owner (sudo -u \(owner) fieldhal …), or give it to this user: sudo chown -R \(userName(me)) \(path)")
        }
        guard info.st_mode & 0o077 == 0 else {
            throw FieldHALError(.permissionDenied, subject: path,
                                detail: "the state directory is open to others (mode \(String(info.st_mode & 0o777, radix: 8)))",
                                advice: "chmod 700 \(path)")
        }
    }

    private static func userName(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return String(cString: name)
    }

    /// The absolute path of `name` inside the state directory.
    public func file(_ name: String) -> String { "\(path)/\(name)" }

    static func makeDirectories(_ path: String, mode: mode_t) throws {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/\(component)"
            if mkdir(current, mode) != 0 && errno != EEXIST {
                throw AtomicFileWriter.ioError(current, "create directory")
            }
        }
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw FieldHALError(.io, subject: path, detail: "exists but is not a directory")
        }
    }
}
