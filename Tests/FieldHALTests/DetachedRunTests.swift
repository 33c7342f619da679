@testable import FieldHAL
import FieldHALProcess
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("DetachedRun: a run that outlives its starter, and waiting for another's exit")
struct DetachedRunTests {
    /// A pipe the starter holds (not close-on-exec) is not the run's: its reader sees EOF
    /// when the starter closes its end, not when the run ends.
    @Test func theRunInheritsNothingButDevNull() throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]) }
        let pid = try DetachedRun.start("/bin/sleep", name: "sleep", ["30"])
        defer { kill(pid, SIGKILL); waitpid(pid, nil, 0) }
        close(ends[1])
        let started = ContinuousClock.now
        var byte: UInt8 = 0
        #expect(read(ends[0], &byte, 1) == 0, "EOF: nobody else holds the write end")
        #expect(ContinuousClock.now - started < .seconds(10), "not at the end of the run's 30 s")
        // Its own session: the run is not in this process's group.
        #expect(getsid(pid) == pid)
    }

    @Test func theRunGetsThisEnvironmentAndTheExtra() throws {
        setenv("FIELDHAL_DETACHED_TEST_INHERITED", "kept", 1)
        defer { unsetenv("FIELDHAL_DETACHED_TEST_INHERITED") }
        let pid = try DetachedRun.start("/bin/sh", name: "sh",
                                        ["-c", #"[ "$FIELDHAL_DETACHED_TEST_INHERITED" = kept ] && [ "$FIELDHAL_DETACHED_TEST_EXTRA" = given ]"#],
                                        extraEnvironment: ["FIELDHAL_DETACHED_TEST_EXTRA": "given"])
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid)
        #expect((status >> 8) & 0xff == 0, "exit \((status >> 8) & 0xff)")
    }

    @Test func waitingForAnExitEndsWithItOrAtTheLimit() throws {
        let short = try DetachedRun.start("/bin/sleep", name: "sleep", ["0.2"])
        defer { waitpid(short, nil, 0) }
        let started = ContinuousClock.now
        #expect(DetachedRun.waitForExit(of: short, upTo: .seconds(30)))
        #expect(ContinuousClock.now - started < .seconds(10), "ended with the exit, not at the limit")

        let long = try DetachedRun.start("/bin/sleep", name: "sleep", ["30"])
        defer { kill(long, SIGKILL); waitpid(long, nil, 0) }
        let waited = ContinuousClock.now
        #expect(!DetachedRun.waitForExit(of: long, upTo: .milliseconds(200)))
        #expect(ContinuousClock.now - waited >= .milliseconds(200))
    }
}
