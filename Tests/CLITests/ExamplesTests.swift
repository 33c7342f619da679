import Foundation
import TestSupport
import Testing

/// The examples a user copies run as they are: the Swift package under examples/swift-kit
/// (FieldHAL as a library, by path: a kit loaded in-process, a fix and a tag); the Python
/// client's use of the daemon is `APITests`' (lab/api-contract drives every route with it).
@Suite(.timeLimit(.minutes(15)))
struct ExamplesTests {
    @Test func theSwiftPackageUsesTheKitInProcess() async throws {
        let package = CLI.repositoryRoot.appendingPathComponent("examples/swift-kit").path
        // At the lowest priority: this build keeps both CPUs of a CI machine busy for a minute
        // and a half while the other suites run, and their latency bounds (a read within 1 s
        // of asking, a cancelled wait back within 1 s) measure FieldHAL, not the compiler.
        let built = try await CLI.runTool("/usr/bin/env", ["nice", "-n", "19", "swift", "build", "--package-path", package])
        #expect(built.status == 0, "\(built.stdout.suffix(2000))\(built.stderr.suffix(2000))")
        let run = try await CLI.runTool(package + "/.build/debug/kit-example", [CLI.exampleConfig])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("nfc: available\n") && run.stdout.contains("gps: available\n"), "\(run.stdout)")
        #expect(run.stdout.contains("fix: 52.51"), "\(run.stdout)")
        #expect(run.stdout.contains("tag: type2 04:A1:B2:C3:D4:E5:F6, text \"trf:duress:demo-alert-1\""), "\(run.stdout)")
        let bad = try await CLI.runTool(package + "/.build/debug/kit-example", ["/nonexistent/kit.toml"])
        #expect(bad.status == 78 && bad.stderr.contains("does not exist"), "\(bad)")
    }
}
