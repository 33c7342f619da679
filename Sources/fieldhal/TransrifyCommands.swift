import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
import FieldHALComposition
import FieldHALFlows
import FieldHALProcess
import FieldHALSystem
import FieldHALVault
import Foundation
import Transrify
import TransrifyAlertChannel
#if canImport(Glibc)
import Glibc
#endif

struct TenantCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "tenant", abstract: "The organisation's Transrify tenant key.",
                                                    subcommands: [SetKey.self, Show.self])

    struct SetKey: FieldHALSubcommand {
        static let configuration = CommandConfiguration(
            commandName: "set-key", abstract: "Store the tenant key in the vault (asked without echo, or one line on stdin).",
            discussion: "Never pass the key as an argument: other users can read command lines.")
        @OptionGroup var global: GlobalOptions
        @Flag(help: "Read the key from standard input.") var keyStdin = false

        func execute(_ environment: Environment) async throws {
            let key = try PINReader(fromStandardInput: keyStdin, what: "tenant key", subject: "tenant", flag: "--key-stdin")
                .read("Tenant key: ").unsafeString()
            try TenantKeyStore(vault: try environment.vault()).save(key)
            print("Tenant key stored.")
        }
    }

    struct Show: FieldHALSubcommand {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Say whether a tenant key is stored (its last 4 characters only).")
        @OptionGroup var global: GlobalOptions

        func execute(_ environment: Environment) async throws {
            guard let key = try TenantKeyStore(vault: try environment.vault()).load() else {
                FileHandle.standardError.write(Data("fieldhal: no tenant key stored — run fieldhal tenant set-key\n".utf8))
                throw ExitCode(78)
            }
            // Every network setting is checked here, so that a technician sees a mistake before a sign-in does.
            let api = try TransrifySettings.baseURL(in: environment.configuration)
            _ = try TransrifySettings.alertChannelURL(in: environment.configuration)
            print("Tenant key …\(key.suffix(4)) stored; API \(api)")
        }
    }
}

/// What `signin` and `session` print: the same lines whatever the session's mode (Req 7, 9).
struct SessionReport: Encodable {
    let customerRef: String
    let session: String

    init(_ record: SessionRecord) {
        customerRef = record.customerRef
        session = "…" + record.sessionIdSuffix
    }

    /// As the daemon answered; nil when not signed in.
    init?(_ answer: APISession) {
        guard answer.signedIn, let customerRef = answer.customerRef, let session = answer.session else { return nil }
        self.customerRef = customerRef
        self.session = session
    }

    var text: String { "You're signed in.\n\(TerminalText.escaped(customerRef)) · session \(TerminalText.escaped(session))" }
}

struct SignInCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "signin", abstract: "Sign in to Transrify with a customer reference and PIN.",
        discussion: """
        The PIN is asked without echo, or read from standard input with --pin-stdin (kiosks). \
        The location comes from the kit's GPS (5 s, then a cached fix, then none). Exit status: \
        0 signed in; 77 invalid credentials; 64 malformed reference or PIN; 75 network or rate \
        limit (try again); 78 configuration (no tenant key, invalid key); 69 tenant suspended.
        """)
    @OptionGroup var global: GlobalOptions
    @Option(help: "The customer reference (asked when omitted).") var customerRef: String?
    @Flag(help: "Read the PIN (and the reference, if not given) from standard input.") var pinStdin = false

    func execute(_ environment: Environment) async throws {
        let reader = PINReader(fromStandardInput: pinStdin)
        let reference = try customerRef ?? readReference(pinStdin)
        // Guarded until it must become the sign-in request's JSON string (Transrify's API).
        let pin = try reader.read("PIN: ")
        // A running daemon signs in with its warm location and does the work after it.
        if let answer = try await environment.throughDaemon({ try await $0.signIn(customerRef: reference, pin: pin.unsafeString()) }) {
            guard let report = SessionReport(answer) else {
                throw FieldHALError(.protocolError, subject: "daemon", detail: "a sign-in answered without a session",
                                    advice: "is the daemon the same FieldHAL version as this command?")
            }
            try Output.emit(report, json: global.json) { report.text }
            return
        }
        let kit = await environment.loadKit(only: [.location])
        let flow = SignInFlow(client: try environment.transrifyClient(), location: try? kit.location(),
                              sessions: try environment.sessionStore(), device: Environment.deviceInfo)
        let outcome = await Result { try await flow.signIn(customerRef: reference, pin: pin.unsafeString()) }
        await kit.close()
        let record = try outcome.get()
        // The same background work after every sign-in; it alone knows the mode.
        AfterAuthentication.start(.signIn, global)
        let report = SessionReport(record)
        try Output.emit(report, json: global.json) { report.text }
    }

    private func readReference(_ fromStandardInput: Bool) throws -> String {
        if !fromStandardInput { FileHandle.standardError.write(Data("Customer reference: ".utf8)) }
        // Read as the PIN after it is (stdio would buffer the PIN's line with this one).
        guard let line = try PINReader.plainLine() else {
            throw FieldHALError(.invalidArgument, subject: "signin", detail: "no customer reference given")
        }
        return line.trimmingCharacters(in: .whitespaces)
    }
}

struct SessionCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(
        commandName: "session", abstract: "Show who is signed in (customer reference, last 4 of the session id).",
        discussion: "--verify asks the API first: an invalid session is cleared; a network error keeps it (exit 75).")
    @OptionGroup var global: GlobalOptions
    @Flag(help: "Verify the session with the API first.") var verify = false

    func execute(_ environment: Environment) async throws {
        let sessions = try environment.sessionStore()
        if verify {
            // With a daemon, it asks (the state directory may be the service user's alone).
            let outcome: SessionVerifier.Outcome
            if let checked = try await environment.throughDaemon({ try await $0.verifySession() }) {
                // An outcome this CLI does not know is not "valid": a newer daemon's word for a
                // session that may be anything must not be shown as signed in.
                switch checked.outcome {
                case "valid": outcome = .valid
                case "cleared": outcome = .cleared
                case "kept": outcome = .kept(reason: checked.reason ?? "no reason given")
                case "signedOut": outcome = .signedOut
                default:
                    throw FieldHALError(.protocolError, subject: "session",
                                        detail: "the daemon answered \"\(TerminalText.escaped(checked.outcome))\", an outcome this fieldhal does not know",
                                        advice: "update fieldhal to the daemon's version")
                }
            } else {
                outcome = try await SessionVerifier(client: try environment.transrifyClient(), sessions: sessions).verify()
            }
            switch outcome {
            case .cleared:
                FileHandle.standardError.write(Data("fieldhal: the session is no longer valid; signed out\n".utf8))
                throw ExitCode(1)
            case .kept(let reason):
                FileHandle.standardError.write(Data("fieldhal: Network error. Please check your connection. (\(reason))\n".utf8))
                throw ExitCode(75)
            case .valid, .signedOut:
                break
            }
        }
        let signedIn: SessionReport?
        if let answer = try await environment.throughDaemon({ try await $0.session() }) {
            signedIn = SessionReport(answer)
        } else {
            signedIn = try sessions.load().map(SessionReport.init)
        }
        guard let report = signedIn else {
            FileHandle.standardError.write(Data("fieldhal: not signed in — run fieldhal signin\n".utf8))
            throw ExitCode(1)
        }
        try Output.emit(report, json: global.json) { report.text }
    }
}

struct SignOutCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(commandName: "signout", abstract: "Sign out: clear the session, token and mode (Req 8).")
    @OptionGroup var global: GlobalOptions

    func execute(_ environment: Environment) async throws {
        if try await environment.throughDaemon({ try await $0.signOut() }) == nil {
            try environment.sessionStore().clear()
        }
        print("Signed out.")
    }
}

/// The background run after a sign-in (not for people: `signin` starts it). Both verdicts
/// open the evidence queue and flush what is pending from earlier runs; only limited mode
/// sends the alert and captures, which `AfterSignIn` decides from the sealed session.
struct AfterSignInCommand: FieldHALSubcommand {
    static let configuration = CommandConfiguration(commandName: "after-signin", shouldDisplay: false)
    @OptionGroup var global: GlobalOptions
    @Flag(help: "After an unlock of the lock rather than a sign-in.") var unlock = false
    /// The pid of the command that started this run: the work waits for its exit.
    static let starterVariable = "FIELDHAL_STARTER_PID"

    func execute(_ environment: Environment) async throws {
        if let starter = ProcessInfo.processInfo.environment[Self.starterVariable].flatMap(Int32.init) {
            // Bounded: a starter that hangs on its way out must not cost the evidence.
            _ = try? await DeviceThread.runOnce(name: "fieldhal-starter-exit") { DetachedRun.waitForExit(of: starter, upTo: .seconds(10)) }
        }
        // Its threads must not show whether it makes requests: the HTTP client's from the start.
        await HTTPSession.prepare()
        EvidenceSealer.prepare()  // its thread, whatever the verdict (docs/stealth.md)
        let work = try environment.afterAuthenticationWork()
        if unlock { try await work.afterUnlock() } else { await work.afterSignIn() }
    }
}

/// Without a daemon, the work after a sign-in or an unlock is a detached background run of
/// our own, the same for both verdicts (with a daemon, the daemon does it: the sign-in or
/// unlock went through its API).
enum AfterAuthentication {
    enum Kind { case signIn, unlock }

    /// After an unlock: only while signed in to Transrify (a duress PIN then raises the
    /// silent alert). Whether a session exists does not depend on the PIN just typed, so
    /// the choice shows nothing; a kit that only uses the lock starts nothing.
    static func afterUnlock(_ environment: Environment, _ global: GlobalOptions) {
        guard ((try? environment.sessionStore().load()) ?? nil) != nil else { return }
        start(.unlock, global)
    }

    static func start(_ kind: Kind, _ global: GlobalOptions) {
        BackgroundRun.start(["after-signin"] + (kind == .unlock ? ["--unlock"] : []) + global.forwarded)
    }
}

extension GlobalOptions {
    /// The options a background run needs to see the same configuration and state.
    var forwarded: [String] {
        (config.map { ["--config", [CommandLineConfiguration.fakeKitName, CommandLineConfiguration.fakeBenchName].contains($0) ? $0 : Self.absolute($0)] } ?? [])
            + (stateDir.map { ["--state-dir", Self.absolute($0)] } ?? [])
    }

    private static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }
}

/// Starts this executable again, detached (its own session, stdio on /dev/null, nothing
/// else inherited), so that work can go on after the command has answered and exited.
enum BackgroundRun {
    static func start(_ arguments: [String]) {
        // It starts its work once this process has exited (`FIELDHAL_STARTER_PID`): what it
        // does differs by verdict, and on a loaded machine work beside this process's last
        // moments would show in how long the command takes (a stealth test saw a duress
        // sign-in 0.1 s slower at the median under a full test run). In the environment,
        // not the arguments: `ps` shows the same command line after every sign-in.
        _ = try? DetachedRun.start("/proc/self/exe", name: "fieldhal", arguments,
                                   extraEnvironment: [AfterSignInCommand.starterVariable: String(getpid())])
    }
}
