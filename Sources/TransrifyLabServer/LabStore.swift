import CSodium
import Foundation
import GRDB
import Transrify

/// The lab server's state in one SQLite file: tenants, users, sessions, alerts, acks,
/// uploaded objects and finalized evidence. Every write is one transaction, so a killed
/// server restarts with a consistent database.
public final class LabStore: Sendable {
    let database: DatabaseQueue

    init(path: String) throws {
        database = try DatabaseQueue(path: path)
        try Self.migrator.migrate(database)
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE tenant (key TEXT PRIMARY KEY, name TEXT NOT NULL, suspended INTEGER NOT NULL DEFAULT 0,
                                     rateLimitPerMinute INTEGER NOT NULL DEFAULT 600);
                CREATE TABLE user (tenantKey TEXT NOT NULL REFERENCES tenant(key), customerRef TEXT NOT NULL,
                                   pinHash TEXT NOT NULL, duressPinHash TEXT NOT NULL, PRIMARY KEY (tenantKey, customerRef));
                CREATE TABLE session (sessionId TEXT PRIMARY KEY, tenantKey TEXT NOT NULL, customerRef TEXT NOT NULL,
                                      mode TEXT NOT NULL, token TEXT NOT NULL, createdAt INTEGER NOT NULL,
                                      lat REAL, lon REAL, platform TEXT, version TEXT);
                CREATE TABLE alert (alertId TEXT PRIMARY KEY, tenantKey TEXT NOT NULL, customerRef TEXT NOT NULL,
                                    sessionId TEXT NOT NULL, alertKind TEXT NOT NULL, lat REAL, lon REAL, createdAt INTEGER NOT NULL);
                CREATE TABLE ack (alertId TEXT NOT NULL REFERENCES alert(alertId), customerRef TEXT NOT NULL,
                                  method TEXT NOT NULL, at INTEGER NOT NULL);
                CREATE TABLE object (key TEXT PRIMARY KEY, tenantKey TEXT NOT NULL, incidentId TEXT NOT NULL,
                                     contentType TEXT NOT NULL, size INTEGER, sha256 TEXT, storedAt INTEGER);
                CREATE TABLE evidence (evidenceId TEXT PRIMARY KEY, tenantKey TEXT NOT NULL, incidentId TEXT NOT NULL,
                                       kind TEXT NOT NULL, key TEXT NOT NULL UNIQUE, size INTEGER NOT NULL,
                                       sha256 TEXT NOT NULL, at INTEGER NOT NULL, finalizeCalls INTEGER NOT NULL DEFAULT 1);
                """)
        }
        // Issue 19: a finalize may say where the item stands in a recording sent in segments.
        migrator.registerMigration("v2-segments") { db in
            try db.execute(sql: """
                ALTER TABLE evidence ADD COLUMN recording TEXT;
                ALTER TABLE evidence ADD COLUMN sequence INTEGER;
                ALTER TABLE evidence ADD COLUMN startedAtMs INTEGER;
                ALTER TABLE evidence ADD COLUMN durationMs INTEGER;
                ALTER TABLE evidence ADD COLUMN previousSha256 TEXT;
                """)
        }
        // Issue 19: an incident's closing manifest (an object of EvidenceManifest's content
        // type), kept as sent so that a manifest the server cannot read is reported, not lost.
        migrator.registerMigration("v3-manifests") { db in
            try db.execute(sql: "ALTER TABLE evidence ADD COLUMN manifest BLOB")
        }
        return migrator
    }

    // MARK: Tenants and users

    func addTenant(key: String, name: String, rateLimitPerMinute: Int = 600) throws {
        try database.write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO tenant (key, name, rateLimitPerMinute) VALUES (?, ?, ?)",
                           arguments: [key, name, rateLimitPerMinute])
        }
    }

    func setSuspended(_ key: String, _ suspended: Bool) throws {
        try database.write { db in
            try db.execute(sql: "UPDATE tenant SET suspended = ? WHERE key = ?", arguments: [suspended, key])
        }
    }

    struct Tenant: Sendable { var key: String; var suspended: Bool; var rateLimitPerMinute: Int }

    func tenant(_ key: String) throws -> Tenant? {
        try database.read { db in
            try Row.fetchOne(db, sql: "SELECT key, suspended, rateLimitPerMinute FROM tenant WHERE key = ?", arguments: [key])
                .map { Tenant(key: $0["key"], suspended: $0["suspended"], rateLimitPerMinute: $0["rateLimitPerMinute"]) }
        }
    }

    func addUser(tenantKey: String, customerRef: String, pin: String, duressPin: String) throws {
        let pinHash = try Self.hash(pin), duressHash = try Self.hash(duressPin)
        try database.write { db in
            try db.execute(sql: "INSERT OR REPLACE INTO user VALUES (?, ?, ?, ?)",
                           arguments: [tenantKey, customerRef, pinHash, duressHash])
        }
    }

    /// NORMAL, DURESS or FAIL. Both hashes are always checked, so the answer's timing says
    /// nothing about which PIN matched; an unknown user costs the same two checks.
    func verdict(tenantKey: String, customerRef: String, pin: String) throws -> Verdict {
        let row = try database.read { db in
            try Row.fetchOne(db, sql: "SELECT pinHash, duressPinHash FROM user WHERE tenantKey = ? AND customerRef = ?",
                             arguments: [tenantKey, customerRef])
        }
        let pinHash: String = row?["pinHash"] ?? Self.decoyHash
        let duressHash: String = row?["duressPinHash"] ?? Self.decoyHash
        let normal = Self.verify(pin, pinHash), duress = Self.verify(pin, duressHash)
        guard row != nil else { return .fail }
        return normal ? .normal : duress ? .duress : .fail
    }

    // MARK: Sessions

    func createSession(tenantKey: String, customerRef: String, mode: Verdict, geo: Geolocation?, device: DeviceInfo) throws -> (sessionId: String, token: String) {
        let sessionId = Self.randomID(), token = Self.randomID(bytes: 32)
        try database.write { db in
            try db.execute(sql: "INSERT INTO session VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           arguments: [sessionId, tenantKey, customerRef, mode.rawValue, token, Self.nowMilliseconds(),
                                       geo?.lat, geo?.lon, device.platform, device.version])
        }
        return (sessionId, token)
    }

    struct Session: Sendable { var tenantKey: String; var customerRef: String; var mode: String }

    func session(_ sessionId: String) throws -> Session? {
        try database.read { db in
            try Row.fetchOne(db, sql: "SELECT tenantKey, customerRef, mode FROM session WHERE sessionId = ?", arguments: [sessionId])
                .map { Session(tenantKey: $0["tenantKey"], customerRef: $0["customerRef"], mode: $0["mode"]) }
        }
    }

    func endSession(_ sessionId: String) throws {
        try database.write { db in try db.execute(sql: "DELETE FROM session WHERE sessionId = ?", arguments: [sessionId]) }
    }

    // MARK: Alerts

    func addAlert(session: Session, sessionId: String, geo: Geolocation?) throws -> String {
        let alertId = Self.randomID()
        try database.write { db in
            try db.execute(sql: "INSERT INTO alert VALUES (?, ?, ?, ?, 'DURESS', ?, ?, ?)",
                           arguments: [alertId, session.tenantKey, session.customerRef, sessionId, geo?.lat, geo?.lon, Self.nowMilliseconds()])
        }
        return alertId
    }

    /// The tenant's duress alerts of the last `maxAgeMilliseconds`, within `radius` of
    /// `geo` when both locations are known (an alert without a location is always near).
    /// `excludingCustomerRef`: the asking session's own user, whose alerts are never theirs to answer.
    func nearbyAlerts(tenantKey: String, geo: Geolocation?, radiusMeters: Int, maxAgeMilliseconds: Int64,
                      excludingCustomerRef excluded: String? = nil) throws -> [Alert] {
        let since = Self.nowMilliseconds() - maxAgeMilliseconds
        let alerts = try database.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM alert WHERE tenantKey = ? AND createdAt >= ? ORDER BY createdAt",
                             arguments: [tenantKey, since]).map(Self.alert)
        }.filter { $0.customerRef != excluded }
        guard let geo else { return alerts }
        return alerts.filter { alert in
            guard let there = alert.geo else { return true }
            return geo.distanceMeters(to: there) <= Double(radiusMeters)
        }
    }

    func alert(_ alertId: String) throws -> Alert? {
        try database.read { db in try Row.fetchOne(db, sql: "SELECT * FROM alert WHERE alertId = ?", arguments: [alertId]).map(Self.alert) }
    }

    private static func alert(_ row: Row) -> Alert {
        let lat: Double? = row["lat"], lon: Double? = row["lon"]
        return Alert(alertId: row["alertId"], alertKind: row["alertKind"], customerRef: row["customerRef"],
                     geo: lat.flatMap { lat in lon.map { Geolocation(lat: lat, lon: $0) } }, createdAt: row["createdAt"])
    }

    func alertTenant(_ alertId: String) throws -> String? {
        try database.read { db in try String.fetchOne(db, sql: "SELECT tenantKey FROM alert WHERE alertId = ?", arguments: [alertId]) }
    }

    func addAck(alertId: String, customerRef: String, method: AckMethod) throws {
        try database.write { db in
            try db.execute(sql: "INSERT INTO ack VALUES (?, ?, ?, ?)", arguments: [alertId, customerRef, method.rawValue, Self.nowMilliseconds()])
        }
    }

    public struct AckRecord: Sendable, Equatable { public var customerRef: String; public var method: String }

    func acks(alertId: String) throws -> [AckRecord] {
        try database.read { db in
            try Row.fetchAll(db, sql: "SELECT customerRef, method FROM ack WHERE alertId = ? ORDER BY at", arguments: [alertId])
                .map { AckRecord(customerRef: $0["customerRef"], method: $0["method"]) }
        }
    }

    // MARK: Objects and evidence

    func addObject(key: String, tenantKey: String, incidentId: String, contentType: String) throws {
        try database.write { db in
            try db.execute(sql: "INSERT INTO object (key, tenantKey, incidentId, contentType) VALUES (?, ?, ?, ?)",
                           arguments: [key, tenantKey, incidentId, contentType])
        }
    }

    struct StoredObject: Sendable { var tenantKey: String; var incidentId: String; var contentType: String; var size: Int64?; var sha256: String? }

    func object(_ key: String) throws -> StoredObject? {
        try database.read { db in
            try Row.fetchOne(db, sql: "SELECT tenantKey, incidentId, contentType, size, sha256 FROM object WHERE key = ?", arguments: [key])
                .map { StoredObject(tenantKey: $0["tenantKey"], incidentId: $0["incidentId"], contentType: $0["contentType"],
                                    size: $0["size"], sha256: $0["sha256"]) }
        }
    }

    func objectStored(key: String, size: Int64, sha256: String) throws {
        try database.write { db in
            try db.execute(sql: "UPDATE object SET size = ?, sha256 = ?, storedAt = ? WHERE key = ?",
                           arguments: [size, sha256, Self.nowMilliseconds(), key])
        }
    }

    /// Records the evidence once per object key; a repeated finalize (a client that lost
    /// the first answer) gets the same evidence id and is counted.
    /// `manifest`: the object's bytes when it is an incident's manifest.
    func finalize(_ request: FinalizeRequest, manifest: [UInt8]? = nil) throws -> String {
        try database.write { db in
            if let existing = try String.fetchOne(db, sql: "SELECT evidenceId FROM evidence WHERE key = ?", arguments: [request.key]) {
                try db.execute(sql: "UPDATE evidence SET finalizeCalls = finalizeCalls + 1 WHERE key = ?", arguments: [request.key])
                return existing
            }
            let evidenceId = Self.randomID()
            let segment = request.segment
            try db.execute(sql: """
                INSERT INTO evidence (evidenceId, tenantKey, incidentId, kind, key, size, sha256, at,
                                      recording, sequence, startedAtMs, durationMs, previousSha256, manifest)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                           arguments: [evidenceId, request.tenantKey, request.incidentId, request.kind.rawValue, request.key,
                                       request.size, request.sha256, Self.nowMilliseconds(),
                                       segment?.recording, segment?.sequence, segment?.startedAtMs, segment?.durationMs,
                                       segment?.previousSha256?.lowercased(), manifest.map { Data($0) }])
            return evidenceId
        }
    }

    public struct EvidenceRecord: Sendable, Equatable {
        public var evidenceId: String, incidentId: String, kind: String, key: String, size: Int64, sha256: String, finalizeCalls: Int
    }

    func evidence() throws -> [EvidenceRecord] {
        try database.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM evidence ORDER BY at").map {
                EvidenceRecord(evidenceId: $0["evidenceId"], incidentId: $0["incidentId"], kind: $0["kind"], key: $0["key"],
                               size: $0["size"], sha256: $0["sha256"], finalizeCalls: $0["finalizeCalls"])
            }
        }
    }

    /// An incident's evidence (any tenant) in the order it arrived, with the manifests among it.
    func incident(_ incidentId: String) throws -> (evidence: [LabState.Evidence], manifests: [EvidenceManifest]) {
        try database.read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT * FROM evidence WHERE incidentId = ? ORDER BY at", arguments: [incidentId])
            return (rows.map(Self.evidence), rows.compactMap { ($0["manifest"] as Data?).flatMap { try? JSONDecoder().decode(EvidenceManifest.self, from: $0) } })
        }
    }

    private static func evidence(_ row: Row) -> LabState.Evidence {
        LabState.Evidence(evidenceId: row["evidenceId"], incidentId: row["incidentId"], kind: row["kind"], key: row["key"],
                          size: row["size"], sha256: row["sha256"], finalizeCalls: row["finalizeCalls"],
                          segment: (row["recording"] as String?).map {
                              EvidenceSegment(recording: $0, sequence: row["sequence"], startedAtMs: row["startedAtMs"],
                                              durationMs: row["durationMs"], previousSha256: row["previousSha256"])
                          },
                          finalizedAtMs: row["at"])
    }

    /// Everything the lab holds for one tenant, oldest first.
    func state(tenantKey: String) throws -> LabState {
        try database.read { db in
            let sessions = try Row.fetchAll(db, sql: "SELECT sessionId, customerRef, mode FROM session WHERE tenantKey = ? ORDER BY createdAt",
                                            arguments: [tenantKey])
                .map { LabState.Session(sessionId: $0["sessionId"], customerRef: $0["customerRef"], mode: $0["mode"]) }
            let acks = try Row.fetchAll(db, sql: "SELECT ack.* FROM ack JOIN alert USING (alertId) WHERE alert.tenantKey = ? ORDER BY at",
                                        arguments: [tenantKey])
                .map { LabState.Ack(alertId: $0["alertId"], customerRef: $0["customerRef"], method: $0["method"]) }
            let rows = try Row.fetchAll(db, sql: "SELECT * FROM evidence WHERE tenantKey = ? ORDER BY at", arguments: [tenantKey])
            let evidence = rows.map(Self.evidence)
            let manifests = rows.compactMap { row -> (evidenceId: String, incidentId: String, manifest: EvidenceManifest?)? in
                guard let bytes = row["manifest"] as Data? else { return nil }
                return (row["evidenceId"], row["incidentId"], try? JSONDecoder().decode(EvidenceManifest.self, from: bytes))
            }
            return LabState(sessions: sessions, alerts: [], acks: acks, evidence: evidence,
                            recordings: LabState.recordings(of: evidence, manifests: manifests.compactMap(\.manifest)),
                            manifests: LabState.manifests(manifests, of: evidence))
        }
    }

    // MARK: Helpers

    /// Lab cost: the minimum argon2id parameters (a lab server checks many PINs quickly).
    static func hash(_ pin: String) throws -> String {
        var out = [CChar](repeating: 0, count: Int(crypto_pwhash_STRBYTES))
        let bytes = Array(pin.utf8CString.dropLast())
        guard crypto_pwhash_str(&out, bytes, UInt64(bytes.count), UInt64(crypto_pwhash_OPSLIMIT_MIN), Int(crypto_pwhash_MEMLIMIT_MIN)) == 0 else {
            throw LabError.internalError("argon2id failed (out of memory?)")
        }
        return String(decoding: out.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func verify(_ pin: String, _ hash: String) -> Bool {
        let bytes = Array(pin.utf8CString.dropLast())
        return crypto_pwhash_str_verify(hash, bytes, UInt64(bytes.count)) == 0
    }

    static let decoyHash: String = (try? hash("decoy-\(randomID())")) ?? ""

    static func randomID(bytes count: Int = 16) -> String {
        var bytes = [UInt8](repeating: 0, count: count)
        randombytes_buf(&bytes, count)
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    static func nowMilliseconds() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}

enum LabError: Error {
    case internalError(String)
}
