import FieldHAL
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A plugin is code the daemon runs as its own user (often root), so its files are trusted
/// as code is: as sshd's `StrictModes` and sudo check theirs.
///
/// The manifest and the program it names, after every symlink is resolved, and each folder
/// above them up to `/`, must be owned by root or by the user FieldHAL runs as, and must not
/// be writable by others: whoever can change any of them can run code as the daemon. A
/// folder writable by all is accepted only when it is root's and sticky (`/tmp`), since
/// there nobody else can rename or replace what it holds. A group-writable one only when the
/// group is root's.
public enum PluginTrust {
    /// Throws `permissionDenied` naming the first path that breaks the rule and why; returns
    /// the path with every symlink resolved.
    @discardableResult
    public static func check(_ path: String, what: String = "plugin file", owners: Set<uid_t> = [0, geteuid()]) throws(FieldHALError) -> String {
        guard let resolved = realpath(path, nil) else {
            throw FieldHALError(.io, subject: path, detail: "cannot resolve the \(what): \(SystemError.describe())")
        }
        let real = String(cString: resolved)
        free(resolved)
        var current = real
        while true {
            var info = stat()
            guard lstat(current, &info) == 0 else {
                throw SystemError.io("cannot inspect it", subject: current)
            }
            if let problem = problem(info, owners: owners) {
                let via = real == path ? "" : " (\(path) leads there)"
                throw FieldHALError(.permissionDenied, subject: current,
                                    detail: "\(problem), so the \(what) \(real)\(via) is not trusted",
                                    advice: "make it root's and writable by its owner only (sudo chown root:root \(current) && sudo chmod go-w \(current)), "
                                        + "or install the plugin under /etc/fieldhal/plugins.d")
            }
            if current == "/" { break }
            let parent = (current as NSString).deletingLastPathComponent
            current = parent.isEmpty ? "/" : parent
        }
        return real
    }

    /// Why one path breaks the rule, or nil.
    static func problem(_ info: stat, owners: Set<uid_t>) -> String? {
        let mode = info.st_mode & 0o7777
        let octal = String(mode, radix: 8)
        guard owners.contains(info.st_uid) else {
            let name = getpwuid(info.st_uid).map { String(cString: $0.pointee.pw_name) } ?? "uid \(info.st_uid)"
            return "it is owned by \(name), not by root or the user FieldHAL runs as"
        }
        let isDirectory = info.st_mode & S_IFMT == S_IFDIR
        if mode & 0o002 != 0 && !(isDirectory && mode & 0o1000 != 0 && info.st_uid == 0) {
            return "anyone may write it (mode \(octal))"
        }
        if mode & 0o020 != 0 && info.st_gid != 0 {
            let group = getgrgid(info.st_gid).map { String(cString: $0.pointee.gr_name) } ?? "gid \(info.st_gid)"
            return "group \(group) may write it (mode \(octal))"
        }
        return nil
    }
}
