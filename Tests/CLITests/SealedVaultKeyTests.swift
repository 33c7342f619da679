import Foundation
import TestSupport
import Testing

/// The vault key sealed to a TPM 2.0 (issue 41): `fieldhal vault seal-key` through Debian's
/// systemd-creds, against swtpm — the TPM emulator QEMU and the TPM's own test suites use —
/// spoken to over its TCP interface by tpm2-tss, exactly as the tools speak to `/dev/tpmrm0`.
@Suite(.serialized)
struct SealedVaultKeyTests {
    /// A kit's PIN hashes sealed under a TPM-sealed key: the kit opens them, a copy of its
    /// state directory on another TPM opens nothing, no file of the copy holds the key, and
    /// under the unit the key systemd unsealed (`$CREDENTIALS_DIRECTORY`) is used with no TPM
    /// call at all.
    @Test func aCopiedStateDirectoryCannotBeOpenedAwayFromItsTPM() async throws {
        let kit = try await SoftwareTPM.start()
        defer { kit.stop() }
        let place = scratch("sealed-key")
        let state = place + "/state", dropIn = place + "/fieldhal.service.d"
        try FileManager.default.createDirectory(atPath: place, withIntermediateDirectories: true)
        let onKit = ["FIELDHAL_STATE_DIR": state, "SYSTEMD_TPM2_DEVICE": kit.device]

        #expect(try await CLI.run(["lock", "setup", "--pin-stdin"], environment: onKit, input: "2468\n2468\n").status == 0)
        let before = try await CLI.run(["lock", "status", "--json"], environment: onKit)
        #expect(Self.vaultKey(before.stdout)?["protection"] == "file", "\(before.stdout)")
        let plainKey = try Data(contentsOf: URL(fileURLWithPath: state + "/vault.key"))

        let sealed = try await CLI.run(["vault", "seal-key", "--unit-drop-in", dropIn], environment: onKit)
        #expect(sealed.status == 0, "\(sealed.stdout)\(sealed.stderr)")
        try await kit.flushSessions()
        #expect(!FileManager.default.fileExists(atPath: state + "/vault.key"))
        let credential = state + "/vault.key.cred"
        #expect((try FileManager.default.attributesOfItem(atPath: credential)[.posixPermissions] as? Int) == 0o600)
        let unit = try String(contentsOfFile: dropIn + "/vault-key.conf", encoding: .utf8)
        #expect(unit.contains("[Service]\nLoadCredentialEncrypted=vault.key:\(credential)\n"), "\(unit)")

        // On the kit: the lock says how its key is kept, and opens with the PIN.
        let status = try await CLI.run(["lock", "status"], environment: onKit)
        try await kit.flushSessions()
        #expect(status.status == 0 && status.stdout.contains("vault key: the vault key is sealed to this kit's TPM 2.0"), "\(status.stdout)\(status.stderr)")
        let wrong = try await CLI.run(["lock", "unlock", "--pin-stdin"], environment: onKit, input: "1111\n")
        try await kit.flushSessions()
        #expect(wrong.status == 77, "\(wrong.stdout)\(wrong.stderr)")  // EX_NOPERM: the PIN was checked, and was wrong
        let right = try await CLI.run(["lock", "unlock", "--pin-stdin"], environment: onKit, input: "2468\n")
        try await kit.flushSessions()
        #expect(right.status == 0, "\(right.stdout)\(right.stderr)")

        // A copy of the state directory, taken to another TPM: nothing opens, and no file
        // in it holds the key.
        let copy = place + "/copy"
        try FileManager.default.copyItem(atPath: state, toPath: copy)
        let elsewhere = try await SoftwareTPM.start()
        defer { elsewhere.stop() }
        let away = try await CLI.run(["lock", "unlock", "--pin-stdin"], environment: ["FIELDHAL_STATE_DIR": copy, "SYSTEMD_TPM2_DEVICE": elsewhere.device],
                                     input: "2468\n")
        #expect(away.status == 69, "\(away.stdout)\(away.stderr)")
        #expect(away.stderr.contains("cannot unseal the vault key"), "\(away.stderr)")
        let files = FileManager.default.enumerator(atPath: copy)?.compactMap { $0 as? String } ?? []
        #expect(!files.isEmpty)
        for file in files {
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: copy + "/" + file))) ?? Data()
            #expect(bytes.range(of: plainKey) == nil, "\(file) holds the vault key")
        }

        // Under the unit, systemd unseals the key at start into the service's credentials
        // directory; the vault takes it from there and asks no TPM (this one is unreachable).
        let credentials = place + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let unsealed = try await CLI.runTool("/usr/bin/env", ["SYSTEMD_TPM2_DEVICE=\(kit.device)", "systemd-creds", "decrypt",
                                                              "--name=vault.key", credential, credentials + "/vault.key"])
        try await kit.flushSessions()
        #expect(unsealed.status == 0, "\(unsealed.stderr)")
        let fromUnit = try await CLI.run(["lock", "unlock", "--pin-stdin"],
                                         environment: ["FIELDHAL_STATE_DIR": state, "CREDENTIALS_DIRECTORY": credentials,
                                                       "SYSTEMD_TPM2_DEVICE": "swtpm:port=1"], input: "2468\n")
        #expect(fromUnit.status == 0, "\(fromUnit.stdout)\(fromUnit.stderr)")

        // An emergency reset erases the lock but keeps the sealed key the unit names: the
        // kit sets up a new PIN under the same TPM seal.
        let reset = try await CLI.run(["lock", "reset", "--yes"], environment: onKit)
        try await kit.flushSessions()
        #expect(reset.status == 0, "\(reset.stdout)\(reset.stderr)")
        #expect(FileManager.default.fileExists(atPath: credential))
        #expect(try await CLI.run(["lock", "setup", "--pin-stdin"], environment: onKit, input: "8642\n8642\n").status == 0)
        try await kit.flushSessions()
        let after = try await CLI.run(["vault", "status", "--json"], environment: onKit)
        #expect(after.stdout.contains("\"protection\" : \"tpm2\""), "\(after.stdout)")
    }

    /// A kit without a TPM keeps its key file, and says what that costs.
    @Test func withoutATPMTheKeyStaysAndTheStatusSaysWhatACopyGivesAway() async throws {
        let state = scratch("no-tpm")
        let environment = ["FIELDHAL_STATE_DIR": state, "SYSTEMD_TPM2_DEVICE": "swtpm:port=1"]
        #expect(try await CLI.run(["lock", "setup", "--pin-stdin"], environment: environment, input: "2468\n2468\n").status == 0)
        let sealed = try await CLI.run(["vault", "seal-key", "--no-drop-in"], environment: environment)
        #expect(sealed.status == 69, "\(sealed.stdout)\(sealed.stderr)")
        #expect(sealed.stderr.contains("cannot seal the vault key to the TPM"), "\(sealed.stderr)")
        #expect(FileManager.default.fileExists(atPath: state + "/vault.key"))
        #expect(!FileManager.default.fileExists(atPath: state + "/vault.key.cred"))
        let status = try await CLI.run(["vault", "status"], environment: environment)
        #expect(status.stdout.contains("every 4-digit PIN in about 80 CPU-minutes"), "\(status.stdout)")
        #expect(try await CLI.run(["lock", "unlock", "--pin-stdin"], environment: environment, input: "2468\n").status == 0)
    }

    static func vaultKey(_ json: String) -> [String: String]? {
        (try? JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])?["vaultKey"] as? [String: String]
    }
}

/// swtpm serving a fresh TPM 2.0 on two loopback ports (commands and control).
struct SoftwareTPM {
    let process: DaemonProcess
    let port: Int
    let directory: String
    var device: String { "swtpm:port=\(port)" }

    static func start() async throws -> SoftwareTPM {
        let directory = scratch("swtpm")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let port = try freePortPair()
        let process = try DaemonProcess(["socket", "--tpm2", "--tpmstate", "dir=\(directory)",
                                         "--server", "type=tcp,port=\(port),bindaddr=127.0.0.1",
                                         "--ctrl", "type=tcp,port=\(port + 1),bindaddr=127.0.0.1",
                                         "--flags", "not-need-init,startup-clear"],
                                        command: [], executable: "/usr/bin/swtpm")
        let tpm = SoftwareTPM(process: process, port: port, directory: directory)
        // Ready when its command port takes a connection.
        let deadline = ContinuousClock.now + .seconds(20)
        while !canConnect(port) {
            guard ContinuousClock.now < deadline, process.process.isRunning else {
                throw TPMFailure(description: "swtpm did not listen on \(port): \(process.output.joined(separator: "\n"))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return tpm
    }

    /// SIGKILL and reaped: swtpm holding a client's connection outlived SIGTERM, and every host
    /// stage left one behind.
    func stop() {
        guard process.process.isRunning else { return }
        kill(process.process.processIdentifier, SIGKILL)
        process.process.waitUntilExit()
    }

    /// What the kernel's resource manager does when a program closes `/dev/tpmrm0`: flush the
    /// sessions it left loaded. swtpm's TCP interface has no resource manager, and a TPM holds
    /// only three sessions (systemd-creds leaves one behind).
    func flushSessions() async throws {
        let flushed = try await CLI.runTool("/usr/bin/tpm2_flushcontext", ["-T", device, "--loaded-session"])
        #expect(flushed.status == 0, "\(flushed.stderr)")
    }

    struct TPMFailure: Error, CustomStringConvertible { let description: String }

    /// A port whose successor is free too (swtpm's control port is the next one).
    private static func freePortPair() throws -> Int {
        for _ in 0..<50 {
            let first = try boundPort(0)
            if (try? boundPort(first + 1)) != nil { return first }
        }
        throw TPMFailure(description: "no two free loopback ports side by side")
    }

    private static func boundPort(_ port: Int) throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = loopback(port)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else { throw TPMFailure(description: "bind \(port): \(String(cString: strerror(errno)))") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func loopback(_ port: Int) -> sockaddr_in {
        sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: in_port_t(UInt16(port).bigEndian),
                    sin_addr: in_addr(s_addr: UInt32(0x7f00_0001).bigEndian), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
    }

    private static func canConnect(_ port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(socket) }
        var address = loopback(port)
        return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } } == 0
    }
}
