@testable import FieldHAL
import FieldHALSystem
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The state directory holds the vault, the lock's state and the evidence queue: one another
/// user owns or can enter is refused, with the command that fixes it (issue 18).
@Suite struct StateDirectoryTests {
    @Test func aNewDirectoryIsMadePrivate() throws {
        let path = NSTemporaryDirectory() + "fieldhal-state-\(UUID().uuidString)/deep/state"
        try StateDirectory(path: path).prepare()
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o700 && info.st_uid == geteuid())
        try StateDirectory(path: path).prepare()  // and is accepted again
    }

    @Test(arguments: [0o755, 0o750, 0o701, 0o777])
    func aDirectoryOpenToOthersIsRefused(_ mode: Int) throws {
        let path = NSTemporaryDirectory() + "fieldhal-state-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: mode])
        chmod(path, mode_t(mode))  // past the umask
        let error = #expect(throws: FieldHALError.self) { try StateDirectory(path: path).prepare() }
        #expect(error?.kind == .permissionDenied)
        #expect(error?.description.contains("open to others (mode \(String(mode, radix: 8)))") == true, "\(error?.description ?? "")")
        #expect(error?.advice == "chmod 700 \(path)")
    }

    /// Needs root to give the directory away (CI runs as root); skipped otherwise.
    @Test func aDirectoryOfAnotherUserIsRefused() throws {
        guard geteuid() == 0 else { return }
        let path = NSTemporaryDirectory() + "fieldhal-state-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        #expect(chown(path, 65534, 65534) == 0)
        let error = #expect(throws: FieldHALError.self) { try StateDirectory(path: path).prepare() }
        #expect(error?.kind == .permissionDenied)
        #expect(error?.description.contains("belongs to nobody, not to root who runs this") == true, "\(error?.description ?? "")")
        #expect(error?.advice == "run as its owner (sudo -u nobody fieldhal …), or give it to this user: sudo chown -R root \(path)")
    }
}
