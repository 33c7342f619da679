import FieldHAL
import FieldHALSystem
import Foundation

/// The emergency reset (seed 003 Req 8, "clear all app data"), with one exception that
/// issue 18 asks for: evidence not yet on the server. A reset is what a user does when the
/// PIN is lost — or what someone holding the kit may force. Erasing the queue then would
/// destroy exactly the evidence a duress sign-in captured, so what the queue needs to go on
/// uploading stays: the sealed items, the queue's key and the tenant key (both in the vault,
/// under the vault key). Nothing of it is readable on the kit without the vault key, and
/// the lock, the PINs, the audit log, sessions, the kit's own key pair and every other
/// entry go. With nothing queued, everything goes, as before.
///
/// A vault key sealed to the TPM (`vault.key.cred`) always stays: it is the kit's, not the
/// user's, and the unit's `LoadCredentialEncrypted=` names it (systemd will not start a
/// unit whose credential file is gone). Everything it sealed goes with the entries.
///
/// What stays does not depend on the verdict of any sign-in: silent (duress) items are kept
/// like the others, and the caller's message is the same either way.
public enum EmergencyReset {
    /// Vault entries that uploading needs.
    public static let keptVaultEntries: Set<String> = [EvidenceQueue.keyEntry, TenantKeyStore.entry]

    public struct Outcome: Sendable, Equatable {
        /// Evidence items still waiting for the server, kept sealed (silent ones included).
        public var itemsKept: Int
    }

    /// Erases `stateDirectory` but for the unuploaded evidence and what uploads it.
    /// A reset killed half-way is finished by running it again: until then the lock finds its
    /// state without its audit log (or the other way round) and refuses everything, fail-closed.
    public static func erase(_ stateDirectory: StateDirectory) throws -> Outcome {
        let root = stateDirectory.path
        let files = FileManager.default
        guard files.fileExists(atPath: root) else { return Outcome(itemsKept: 0) }
        let evidence = stateDirectory.file("evidence")
        let items = ((try? files.contentsOfDirectory(atPath: evidence)) ?? []).filter { $0.hasSuffix(".item") }.count
        let keep: Set<String> = items > 0 ? ["evidence", "vault", "vault.key", "vault.key.cred"] : ["vault.key.cred"]
        for entry in try files.contentsOfDirectory(atPath: root).sorted() where !keep.contains(entry) {
            try remove(root + "/" + entry)
        }
        if items > 0 {
            let vault = stateDirectory.file("vault")
            for entry in (try? files.contentsOfDirectory(atPath: vault)) ?? [] {
                let name = entry.hasSuffix(".sealed") ? String(entry.dropLast(".sealed".count)) : entry
                if !keptVaultEntries.contains(name) { try remove(vault + "/" + entry) }
            }
        }
        return Outcome(itemsKept: items)
    }

    private static func remove(_ path: String) throws {
        do {
            try FileManager.default.removeItem(atPath: path)
        } catch {
            throw FieldHALError(.io, subject: path, detail: "cannot erase: \(error.localizedDescription)",
                                advice: "check its owner and mode, then run fieldhal lock reset --yes again")
        }
    }
}
