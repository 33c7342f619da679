import FieldHAL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A daemon's private scratch folder, and the safe removal of what earlier daemons left there.
///
/// Why not `/tmp/<name>-<uid>`: a predictable name in a shared directory can be made first by
/// another user (every recording then failed until root removed it), and a folder removed by
/// path can be swapped for a symlink between the check and the removal (a daemon once
/// deleted its own `vault.key` that way). So the folder lives where only the daemon's user
/// can reach (the unit's `RuntimeDirectory`, or the 0700 state directory), is checked to be
/// this user's and private before use, and anything removed is removed with
/// `openat`/`unlinkat` relative to a descriptor of its parent, never following a symlink.
public enum PrivateScratch {
    /// `$RUNTIME_DIRECTORY/scratch` under the unit (a tmpfs, emptied at every stop), else
    /// `scratch` inside the state directory.
    public static func base(stateDirectory: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let runtime = environment["RUNTIME_DIRECTORY"]?.split(separator: ":").first, !runtime.isEmpty {
            return String(runtime) + "/scratch"
        }
        return stateDirectory + "/scratch"
    }

    /// Makes `path` (mode 0700) if it does not exist; refuses one that is not a directory of
    /// this user's closed to everyone else, or that is a symlink.
    public static func prepare(_ path: String) throws {
        if mkdir(path, 0o700) != 0, errno != EEXIST {
            throw AtomicFileWriter.ioError(path, "make the scratch folder")
        }
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            throw FieldHALError(.io, subject: path, detail: "is not a directory this user can open (\(SystemError.describe()))",
                                advice: "remove it; the daemon makes it again")
        }
        defer { close(fd) }
        try checkPrivate(fd, path)
    }

    private static func checkPrivate(_ fd: Int32, _ path: String) throws {
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == geteuid(), info.st_mode & 0o077 == 0 else {
            throw FieldHALError(.io, subject: path, detail: "is not a private directory of this user (owner uid and mode 0700 expected)",
                                advice: "remove it; the daemon makes it again")
        }
    }

    /// Removes each entry of `base` for which `isStale` says so, with everything in it. Only
    /// entries owned by this user are removed; a symlink is removed itself, never followed.
    /// Returns how many entries were removed. Errors are not thrown: what cannot be removed
    /// stays, and the next start tries again.
    @discardableResult
    public static func removeStale(in base: String, where isStale: (String) -> Bool) -> Int {
        let fd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        guard (try? checkPrivate(fd, base)) != nil else { return 0 }
        var removed = 0
        for name in entries(of: fd) where isStale(name) {
            if removeEntry(name, in: fd, depth: 0) { removed += 1 }
        }
        return removed
    }

    /// The names in the directory open as `fd` (but . and ..).
    static func entries(of fd: Int32) -> [String] {
        let copy = dup(fd)
        guard copy >= 0, let directory = fdopendir(copy) else {
            if copy >= 0 { close(copy) }
            return []
        }
        defer { closedir(directory) }
        rewinddir(directory)
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Removes `name` in the directory `parent`: a directory's contents first, through a
    /// descriptor opened without following links. Deeper than 32 levels is left alone.
    private static func removeEntry(_ name: String, in parent: Int32, depth: Int) -> Bool {
        var info = stat()
        guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_uid == geteuid() else { return false }
        guard info.st_mode & S_IFMT == S_IFDIR else { return unlinkat(parent, name, 0) == 0 }
        guard depth < 32 else { return false }
        let child = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard child >= 0 else { return false }
        // The directory opened must be the one inspected (not swapped in between).
        var opened = stat()
        guard fstat(child, &opened) == 0, opened.st_dev == info.st_dev, opened.st_ino == info.st_ino else {
            close(child)
            return false
        }
        for entry in entries(of: child) { _ = removeEntry(entry, in: child, depth: depth + 1) }
        close(child)
        return unlinkat(parent, name, AT_REMOVEDIR) == 0
    }
}
