// fieldhal-front: installed as `fieldhal`. A command a running daemon answers (status, a
// fix, a tag read, the lock's state, a haptic or a sound…) is asked of the daemon here, in a
// program that links no backend library, no HTTP stack and no event loop, so that a script
// calling `fieldhal` in a loop pays a few milliseconds a call instead of the whole CLI's
// start (issue 20's goal: ≤ 10 ms). Everything else — another command, --help, a parse the
// front is not sure of, no daemon answering — is handed to the whole CLI with execv, in
// the same process, with the same arguments and environment: output, exit status, signals
// and the process listing are the whole CLI's.
import ArgumentParser
import FieldHAL
import FieldHALAPI
import FieldHALCommandLine
#if canImport(Glibc)
import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())

// A command the front never serves goes over at once, before any parsing: the hand-over
// is then all a `fieldhal run` or `fieldhal --help` pays for the front.
guard let first = arguments.first, Front.servedCommandNames.contains(first) else { WholeCLI.exec(arguments) }

// Only a parse that lands on a served command is the front's; `--help`, a typo, an option
// it does not know are the whole CLI's to answer, in its words.
if let parsed = try? Front.parseAsRoot(arguments), let command = parsed as? any ServedCommand,
   let daemon = Front.daemon(command.global) {
    do {
        if try command.serve(daemon) { exit(0) }
    } catch let problem as APIProblem {
        Output.failure(problem.description)
        exit(ExitStatus.code(problem))
    } catch let error as FieldHALError {
        Output.failure(error.description)
        exit(ExitStatus.code(error.kind))
    } catch {
        // Anything else (a value the front cannot check as the CLI does): the CLI decides.
    }
}
WholeCLI.exec(arguments)
