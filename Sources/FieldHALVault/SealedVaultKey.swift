import CSodium
import FieldHAL
import FieldHALProcess
import FieldHALSystem
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// How the vault key is kept, and so what a copy of the state directory gives away.
public enum VaultKeyProtection: String, Sendable, Codable, Equatable {
    /// `vault.key`, a file beside the sealed entries: whoever copies the state directory
    /// has the key, and can try PINs against the sealed hashes at their own pace.
    case file
    /// `vault.key.cred`, sealed to this kit's TPM 2.0 by systemd-creds: only this kit's TPM
    /// opens it, so a copied state directory is sealed bytes and nothing else.
    case tpm2

    /// How the key of the vault in `stateDirectory` is kept, from which files are there (the
    /// key is not opened). A plain key file wins: it is there only before sealing, or when a
    /// seal was cut short before the file was removed (the two are the same key then).
    public init(of stateDirectory: StateDirectory) {
        let plain = access(stateDirectory.file("vault.key"), F_OK) == 0
        self = !plain && access(stateDirectory.file("vault.key.cred"), F_OK) == 0 ? .tpm2 : .file
    }

    /// What an attacker who copies the state directory can do, in a sentence a technician
    /// can act on (`fieldhal lock status`, `fieldhal vault status`).
    public var offlineAttack: String {
        switch self {
        case .file:
            // argon2id at FieldHAL's settings: about 0.5 s of one CPU per guess (docs/lock.md).
            "the vault key is a file beside the sealed PIN hashes: anyone with a copy of the state directory can try "
                + "every 4-digit PIN in about 80 CPU-minutes and every 6-digit PIN in about 6 CPU-days, with no lockout; "
                + "seal the key to the kit's TPM with `fieldhal vault seal-key`"
        case .tpm2:
            "the vault key is sealed to this kit's TPM 2.0: a copy of the state directory cannot be opened elsewhere, "
                + "and on the kit the lockout above is what limits guesses"
        }
    }
}

/// The vault key sealed to the TPM with systemd-creds (Debian's systemd): the same sealed
/// credential a unit's `LoadCredentialEncrypted=` opens, so under the packaged unit systemd
/// unseals it at start and the daemon reads it from `$CREDENTIALS_DIRECTORY` (memory, never
/// disk); a command run by root outside the unit unseals it through the same tool.
///
/// Why systemd-creds rather than tpm2-tss directly: it is already on every Debian kit, it
/// speaks to the kernel's resource manager (`/dev/tpmrm0`), and what it seals is what the
/// unit can load — one format, one tool, nothing of our own between the TPM and the key.
public enum SealedVaultKey {
    /// The credential's name: systemd checks it on decryption, so a credential sealed for
    /// another purpose cannot be passed off as the vault key.
    public static let credentialName = "vault.key"
    public static let tool = "/usr/bin/systemd-creds"
    /// A TPM answers in milliseconds; a wedged one must not hold a command forever.
    static let deadline: Duration = .seconds(30)

    /// Opens the sealed key at `path` (32 bytes, straight into guarded memory).
    static func unseal(_ path: String) throws -> SecretBytes {
        var output = try run(["decrypt", "--name=\(credentialName)", path, "-"], subject: path, doing: "unseal the vault key")
        defer { sodium_memzero(&output, output.count) }
        guard output.count == Int(crypto_secretbox_KEYBYTES) else {
            throw VaultError(kind: .keyCorrupt, path: path, detail: "the sealed key opened to \(output.count) bytes, not a vault key; restore vault.key from backup")
        }
        return try SecretBytes(wiping: &output)
    }

    /// Seals the key file at `keyPath` to the TPM, as text systemd-creds reads back.
    /// `device`: a TPM device or a tss2 TCTI such as `swtpm:port=2321` (nil: systemd's
    /// choice, `/dev/tpmrm0`); `pcrs`: the PCRs the seal is bound to (nil: systemd's
    /// default, 7, the Secure Boot policy; systemd 252 seals to no PCR with "" but then cannot
    /// open what it sealed, so that is not offered).
    static func seal(keyPath: String, device: String?, pcrs: String?) throws -> [UInt8] {
        var arguments = ["encrypt", "--with-key=tpm2", "--name=\(credentialName)"]
        if let device { arguments.append("--tpm2-device=\(device)") }
        if let pcrs { arguments.append("--tpm2-pcrs=\(pcrs)") }
        return try run(arguments + [keyPath, "-"], subject: keyPath, doing: "seal the vault key to the TPM")
    }

    /// Runs systemd-creds with a minimal environment (only the TPM's address passes through)
    /// and returns its standard output; a failure carries its last line of standard error.
    private static func run(_ arguments: [String], subject: String, doing what: String) throws -> [UInt8] {
        var environment = ["PATH": "/usr/bin:/bin", "SYSTEMD_LOG_LEVEL": "err"]
        if let device = getenv("SYSTEMD_TPM2_DEVICE") { environment["SYSTEMD_TPM2_DEVICE"] = String(cString: device) }
        guard access(tool, X_OK) == 0 else {
            throw VaultError(kind: .keySealed, path: subject, detail: "cannot \(what): \(tool) is missing — install systemd (Debian 12 or later)")
        }
        let child: ChildProcess
        do {
            child = try ChildProcess(tool, arguments, environment: environment)
        } catch {
            throw VaultError(kind: .keySealed, path: subject, detail: "cannot \(what): \(error)")
        }
        var output: [UInt8] = [], errors: [UInt8] = []
        var open: [Int32: Bool] = [child.standardOutput!: true, child.standardError!: false]  // descriptor: is output
        let end = ContinuousClock.now + deadline
        while !open.isEmpty {
            let left = end - .now
            guard left > .zero else {
                child.kill()
                child.waitForExit()
                sodium_memzero(&output, output.count)
                throw VaultError(kind: .keySealed, path: subject, detail: "cannot \(what): the TPM did not answer within \(deadline.components.seconds) s")
            }
            var entries = open.keys.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            if case .failure = SystemCall.poll(&entries, timeout: left) { break }
            for entry in entries where entry.revents != 0 {
                var chunk = [UInt8](repeating: 0, count: 4096)
                let outcome = SystemCall.attempt { read(entry.fd, &chunk, chunk.count) }
                if case .failure(.resourceTemporarilyUnavailable) = outcome { continue }
                guard case .success(let count) = outcome, count > 0 else { open[entry.fd] = nil; continue }
                if open[entry.fd] == true { output += chunk[0..<count] } else { errors += chunk[0..<count] }
                sodium_memzero(&chunk, chunk.count)
            }
        }
        child.waitForExit()
        guard child.terminationStatus == 0 else {
            sodium_memzero(&output, output.count)
            let said = String(decoding: errors, as: UTF8.self).split(separator: "\n").last.map(String.init) ?? "no message"
            throw VaultError(kind: .keySealed, path: subject,
                             detail: "cannot \(what): systemd-creds exited \(child.terminationStatus ?? -1): \(TerminalText.escaped(said)) — "
                                 + "it needs the TPM this key was sealed to (root, or the unit's LoadCredentialEncrypted=)")
        }
        return output
    }
}
