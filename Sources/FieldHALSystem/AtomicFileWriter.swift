import FieldHAL
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes a file so that, whatever happens and whenever the process dies, the path holds
/// either its old content or the complete new content — never a torn file.
///
/// The bytes go to a temporary file in the same directory; `commit()` fsyncs it, renames
/// it over the destination and fsyncs the directory so the rename itself is durable.
/// Dropping the writer without committing removes the temporary file.
///
/// A `RecordingDestination` says where: a path; a name in a directory held open (the same
/// steps, relative to that descriptor); or a `MemoryFile`, written in place through its
/// descriptor — it has no name to rename over, and whoever made it reads it only once the
/// writer is done.
public final class AtomicFileWriter {
    /// Points at which a test can make a write fail, as if the process died there.
    public enum Step: String, Sendable, CaseIterable {
        case createdTemporary, wroteSome, wroteAll, syncedFile, renamed
    }

    /// What messages call the file: its path, its name in the directory, or "memory".
    public let path: String
    private let temporaryPath: String
    private var descriptor: Int32
    private var committed = false
    private let faultInjection: (@Sendable (Step) throws -> Void)?
    private var bytesWritten = 0
    /// Where the names are relative to: the working directory for a path, or a copy of the
    /// directory descriptor (this writer's own, so the caller's may close first).
    private let directory: Int32
    /// Writing into a `MemoryFile`'s descriptor, not through a temporary file.
    private let inPlace: Bool

    /// Creates the temporary file with `mode` (0600 by default: state is private).
    public convenience init(path: String, mode: mode_t = 0o600, faultInjection: (@Sendable (Step) throws -> Void)? = nil) throws {
        try self.init(.path(path), mode: mode, faultInjection: faultInjection)
    }

    public init(_ destination: RecordingDestination, mode: mode_t = 0o600, faultInjection: (@Sendable (Step) throws -> Void)? = nil) throws {
        path = destination.name
        self.faultInjection = faultInjection
        switch destination {
        case .memory(let file):
            // A copy of the file's descriptor, at its start, the file emptied: what a fresh
            // open would give, without a name to open it by. (The two share an offset; the
            // file's own reads are positioned, so they never move it.)
            inPlace = true
            directory = AT_FDCWD
            temporaryPath = path
            descriptor = fcntl(file.descriptor, F_DUPFD_CLOEXEC, 0)
            guard descriptor >= 0 else { throw Self.ioError(path, "dup") }
            guard ftruncate(descriptor, 0) == 0, lseek(descriptor, 0, SEEK_SET) == 0 else { throw Self.ioError(path, "empty") }
            return
        case .path(let path):
            inPlace = false
            directory = AT_FDCWD
            let name = path.split(separator: "/").last ?? Substring(path)
            temporaryPath = "\(FilePaths.directory(of: path))/.\(name).tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        case .entry(let entry, let parent):
            guard !entry.isEmpty, !entry.contains("/"), entry != ".", entry != ".." else {
                throw FieldHALError(.invalidArgument, subject: "file \(entry)", detail: "a file in a directory needs a plain name")
            }
            inPlace = false
            temporaryPath = ".\(entry).tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            directory = fcntl(parent, F_DUPFD_CLOEXEC, 0)
            guard directory >= 0 else { descriptor = -1; throw Self.ioError(path, "dup the directory") }
        }
        descriptor = openat(directory, temporaryPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard descriptor >= 0 else { throw Self.ioError(path, "create \(temporaryPath)") }
        // open() applies the umask; the mode asked for is the mode meant.
        fchmod(descriptor, mode)
        try inject(.createdTemporary)
    }

    deinit {
        if descriptor >= 0 { close(descriptor) }
        if !committed && !inPlace { unlinkat(directory, temporaryPath, 0) }
        if directory != AT_FDCWD { close(directory) }
    }

    /// Appends bytes to the temporary file.
    public func write(_ bytes: UnsafeRawBufferPointer) throws {
        try SystemCall.writeAll(bytes, to: descriptor, file: path)
        bytesWritten += bytes.count
        if bytesWritten > 0 { try inject(.wroteSome) }
    }

    public func write(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { try write($0) }
    }

    /// Overwrites bytes already written (a WAV header's sizes, once they are known).
    public func write(_ bytes: [UInt8], at offset: Int) throws {
        let result = bytes.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
        guard result == bytes.count else { throw Self.ioError(path, "write at \(offset)") }
    }

    /// An exclusive `flock` on the file being written, held by the returned descriptor
    /// (the caller closes it) past `commit`: the lock is on the file, so it is already held
    /// when the file appears under its name. For files whose writer must be told apart from
    /// a writer that died (the evidence queue's payloads).
    public func lockedDescriptor() throws -> Int32 {
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else { throw Self.ioError(path, "lock \(temporaryPath)") }
        let copy = dup(descriptor)
        guard copy >= 0 else { throw Self.ioError(path, "dup") }
        return copy
    }

    /// Makes the new content durable and visible at `path`.
    public func commit() throws {
        if inPlace { return try commitInPlace() }
        try inject(.wroteAll)
        guard fsync(descriptor) == 0 else { throw Self.ioError(path, "fsync") }
        try inject(.syncedFile)
        guard close(descriptor) == 0 else { descriptor = -1; throw Self.ioError(path, "close") }
        descriptor = -1
        // `path` is the destination's name relative to `directory`: the path, or the entry.
        guard renameat(directory, temporaryPath, directory, path) == 0 else { throw Self.ioError(path, "rename into place") }
        committed = true
        try inject(.renamed)
        try syncDirectory()
    }

    /// Like `commit`, but only if nothing is at `path` yet: returns false (and leaves the
    /// file there alone) when another process got there first. For files that must be made
    /// once, such as a key two processes may create at the same moment: `link` fails with
    /// EEXIST where `rename` would replace the other's file.
    public func commitIfAbsent() throws -> Bool {
        if inPlace {
            try commitInPlace()
            return true
        }
        try inject(.wroteAll)
        guard fsync(descriptor) == 0 else { throw Self.ioError(path, "fsync") }
        try inject(.syncedFile)
        guard close(descriptor) == 0 else { descriptor = -1; throw Self.ioError(path, "close") }
        descriptor = -1
        if linkat(directory, temporaryPath, directory, path, 0) != 0 {
            let code = errno
            guard code == EEXIST else { throw Self.ioError(path, "link into place", errno: code) }
            return false  // deinit removes the temporary file
        }
        unlinkat(directory, temporaryPath, 0)
        committed = true
        try inject(.renamed)
        try syncDirectory()
        return true
    }

    /// The file was written where it is: only the writer's own descriptor is left to sync
    /// (nothing to do for a memfd; a disk file passed this way is made durable too) and close.
    private func commitInPlace() throws {
        try inject(.wroteAll)
        guard fsync(descriptor) == 0 || errno == EINVAL || errno == EROFS else { throw Self.ioError(path, "fsync") }
        guard close(descriptor) == 0 else { descriptor = -1; throw Self.ioError(path, "close") }
        descriptor = -1
        committed = true
    }

    private func inject(_ step: Step) throws {
        try faultInjection?(step)
    }

    /// Makes the rename durable: the directory held open, or the path's.
    private func syncDirectory() throws {
        if directory == AT_FDCWD { return try Self.syncDirectory(FilePaths.directory(of: path)) }
        guard fsync(directory) == 0 else { throw Self.ioError(path, "fsync directory") }
    }

    /// fsync on a directory makes the entries created or renamed in it durable.
    static func syncDirectory(_ directory: String) throws {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw ioError(directory, "open directory") }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw ioError(directory, "fsync directory") }
    }

    static func ioError(_ path: String, _ operation: String, errno code: Int32 = errno) -> FieldHALError {
        SystemError.file(path, operation, code: code)
    }
}

/// Whole-file atomic writes and plain reads.
public enum AtomicFile {
    /// Replaces the file at `path` with `bytes`, atomically and durably.
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600,
                             faultInjection: (@Sendable (AtomicFileWriter.Step) throws -> Void)? = nil) throws {
        let writer = try AtomicFileWriter(path: path, mode: mode, faultInjection: faultInjection)
        try writer.write(bytes)
        try writer.commit()
    }

    /// The file's bytes, or `nil` if it does not exist.
    public static func read(_ path: String) throws -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw AtomicFileWriter.ioError(path, "open")
        }
        defer { close(fd) }
        return try RegularFile.readToEnd(fd, path: path, operation: "read")
    }
}
