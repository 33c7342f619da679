import ArgumentParser
import FieldHAL
import FieldHALComposition
import FieldHALDaemon
import FieldHALAPI
import FieldHALFlows
import FieldHALHotplug
import FieldHALLock
import FieldHALServer
import FieldHALSystem
import Foundation
import Logging
import ServiceLifecycle
import Transrify
import UnixSignals
import FieldHALCommandLine

/// `fieldhal run`: the long-running service of a kiosk or kit (issue 8, first part).
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run as a service: nearby alerts, evidence uploads, session checks, the lock's idle relock.",
        discussion: """
        Logs to standard output, one line per event; under systemd (JOURNAL_STREAM) each line \
        carries its syslog priority for the journal and no timestamp of its own. SIGHUP \
        reloads the configuration; SIGTERM or SIGINT stops it gracefully: the evidence queue \
        keeps every item whose upload was interrupted (each step is saved), and devices are \
        released. Under systemd: systemd/fieldhal.service.
        """)
    @OptionGroup var global: GlobalOptions
    @Option(help: "Seconds between evidence-queue flushes.") var uploadInterval = 15
    @Option(help: "Seconds between session checks (Req 18).") var verifyInterval = 300

    func run() async throws {
        ProcessMemory.returnLargeBuffersWhenFreed()
        await DispatchTimers.prepare()
        let toJournal = JournalLogHandler.standardOutputIsJournal
        LoggingSystem.bootstrap { label in
            if toJournal { return JournalLogHandler() }
            var handler = StreamLogHandler.standardOutput(label: label)
            handler.logLevel = .info
            return EscapingLogHandler(inner: handler)
        }
        let logger = Logger(label: "fieldhal")
        // A configuration the daemon cannot run with: one line on stderr and its exit code
        // (EX_CONFIG for a bad file), as every other command.
        let daemon: Daemon
        do {
            daemon = try Daemon(options: global, logger: logger,
                                uploadInterval: .seconds(max(1, uploadInterval)), verifyInterval: .seconds(max(5, verifyInterval)))
        } catch {
            let failure = CommandFailure(error)
            FileHandle.standardError.write(Data("fieldhal: \(failure.description)\n".utf8))
            throw ExitCode(failure.exitCode)
        }
        // One daemon per state directory, whatever its socket: the second says who holds it
        // and exits EX_TEMPFAIL (75), before it opens a device or starts an upload.
        let lock: DaemonLock
        do {
            lock = try DaemonLock(daemon.current.stateDirectory)
        } catch {
            FileHandle.standardError.write(Data("fieldhal: \(CommandFailure(error).description)\n".utf8))
            throw ExitCode(75)
        }
        defer { withExtendedLifetime(lock) {} }
        // Trap SIGHUP before saying "running": a reload asked for from then on is never lost
        // (and never kills the process, which is SIGHUP's default).
        let hangUps = await UnixSignalsSequence(trapping: .sighup)
        let host = await daemon.openDevices()
        let group = ServiceGroup(configuration: .init(services: daemon.services(host: host, hangUps: hangUps),
                                                      gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        daemon.group.withLock { $0 = group }
        try await group.run()
        logger.info("fieldhal stopped")
        // Erased under it: EX_TEMPFAIL, so that systemd (Restart=on-failure) starts it afresh.
        if daemon.erased.value { throw ExitCode(75) }
    }
}
