import ArgumentParser
import FieldHAL
import FieldHALCommandLine
import FieldHALComposition
import FieldHALSystem
import FieldHALVault
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal vault`: how the key to the kit's secrets is kept, and sealing it to the TPM.
struct VaultCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vault", abstract: "The vault that holds the kit's secrets: how its key is kept, and sealing it to the TPM.",
        subcommands: [Status.self, SealKey.self])

    struct Status: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "status", abstract: "Say how the vault key is kept, and what a copy of the state directory gives away.")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            let vault = try environment.vault()
            let shown = Shown(vault)
            try Output.emit(shown, json: global.json) { "vault key: \(shown.protection.rawValue) — \(shown.offlineAttack)" }
        }
    }

    struct SealKey: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "seal-key",
            abstract: "Seal the vault key to this kit's TPM 2.0, so that a copied state directory cannot be opened elsewhere.",
            discussion: """
            Seals vault.key with systemd-creds (--with-key=tpm2) into vault.key.cred, checks that \
            the TPM opens it to the same key, then overwrites and removes vault.key. Writes a \
            drop-in for the daemon's unit (LoadCredentialEncrypted=), so that systemd unseals the \
            key at start and hands it to the daemon in memory; run `systemctl daemon-reload` and \
            restart the daemon after. Run as root, with the daemon stopped. A kit without a TPM \
            keeps its key file: `fieldhal vault status` says what that means.
            """)
        @OptionGroup var global: GlobalOptions
        @Option(help: ArgumentHelp("The TPM: a device (default /dev/tpmrm0) or a tss2 TCTI such as swtpm:port=2321.", valueName: "device"))
        var tpm2Device: String?
        @Option(help: ArgumentHelp("The PCRs the seal is bound to, e.g. 7 or 0+7 (default: systemd's, 7 — the Secure Boot policy).", valueName: "pcrs"))
        var tpm2Pcrs: String?
        @Option(help: ArgumentHelp("Where the unit's drop-in goes.", valueName: "directory"))
        var unitDropIn = "/etc/systemd/system/fieldhal.service.d"
        @Flag(help: "Write no drop-in (the daemon is not run by the packaged unit).") var noDropIn = false

        func execute(_ environment: Environment) async throws {
            let vault = try environment.vault()
            let already = vault.keyProtection == .tpm2
            try vault.sealKeyToTPM(device: tpm2Device, pcrs: tpm2Pcrs)
            var wrote: String?
            if !noDropIn {
                wrote = unitDropIn + "/vault-key.conf"
                let text = """
                # Written by `fieldhal vault seal-key`: systemd unseals the vault key with the TPM at
                # start and hands it to the daemon in $CREDENTIALS_DIRECTORY, in memory only.
                [Service]
                LoadCredentialEncrypted=\(SealedVaultKey.credentialName):\(vault.sealedKeyPath)

                """
                if mkdir(unitDropIn, 0o755) != 0 && errno != EEXIST {
                    throw FieldHALError(.io, subject: unitDropIn, detail: "create directory: \(SystemError.describe()) — or pass --no-drop-in")
                }
                try AtomicFile.write(Array(text.utf8), to: wrote!, mode: 0o644)
            }
            struct Sealed: Encodable { let protection: VaultKeyProtection; let sealedKey: String; let unitDropIn: String?; let alreadySealed: Bool }
            let report = Sealed(protection: .tpm2, sealedKey: vault.sealedKeyPath, unitDropIn: wrote, alreadySealed: already)
            try Output.emit(report, json: global.json) {
                (already ? "the vault key was already sealed to the TPM: \(report.sealedKey)" : "the vault key is sealed to the TPM: \(report.sealedKey); vault.key is gone")
                    + (report.unitDropIn.map { "\nwrote \($0): run `systemctl daemon-reload`, then restart fieldhal" } ?? "")
            }
        }
    }

    struct Shown: Encodable {
        let protection: VaultKeyProtection
        let offlineAttack: String
        init(_ vault: Vault) {
            protection = vault.keyProtection
            offlineAttack = vault.keyProtection.offlineAttack
        }
    }
}
