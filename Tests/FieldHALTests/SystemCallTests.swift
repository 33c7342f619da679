import FieldHAL
import FieldHALSystem
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The system calls' one seam (issue 42): an interruption is not a failure and does not
/// shorten a wait; a failure is one typed error that names the call and the errno.
@Suite("System calls")
struct SystemCallTests {
    @Test func aFailureNamesTheCallAndTheErrno() {
        #expect {
            try SystemCall.retrying("close", subject: "descriptor -1") { close(-1) }
        } throws: { error in
            guard let error = error as? FieldHALError else { return false }
            return error.kind == .io && error.subject == "descriptor -1" && error.detail == "close: Bad file descriptor"
        }
        guard case .failure(let code) = SystemCall.attempt({ flock(-1, LOCK_EX) }) else {
            Issue.record("flock on no descriptor succeeded")
            return
        }
        #expect(code == .badFileDescriptor)
        #expect(throws: FieldHALError.self) { try SystemCall.retrying("open", file: "/no/such/dir/file") { open("/no/such/dir/file", O_RDONLY) } }
    }

    /// Signals land on the thread while it waits (their handler installed without
    /// SA_RESTART, so poll(2) returns EINTR): the wait goes on until what it waits for
    /// comes, and ends as that, not as an error.
    @Test func signalsDoNotEndAWait() async throws {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        var previous = sigaction()
        sigaction(SIGUSR2, &action, &previous)
        defer { sigaction(SIGUSR2, &previous, nil) }

        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let reading = ends[0]
        let waiter = Mutex<pthread_t?>(nil)
        let outcome = Mutex<Result<Int, FieldHALError>?>(nil)
        let thread = Thread {
            // A thread made from the concurrency pool's inherits its mask, which blocks
            // signals: this one takes SIGUSR2.
            var only = sigset_t()
            sigemptyset(&only)
            sigaddset(&only, SIGUSR2)
            pthread_sigmask(SIG_UNBLOCK, &only, nil)
            waiter.withLock { $0 = pthread_self() }
            var entries = [pollfd(fd: reading, events: Int16(POLLIN), revents: 0)]
            let result = Result { () throws(FieldHALError) in try SystemCall.poll(&entries, timeout: .seconds(60), subject: "a pipe") }
            outcome.withLock { $0 = result }
        }
        thread.start()
        // Ten signals to the waiting thread, then the byte it waits for.
        var signalled = 0
        while signalled < 10 {
            if let target = waiter.withLock({ $0 }) {
                pthread_kill(target, SIGUSR2)
                signalled += 1
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(outcome.withLock { $0 == nil }, "the signals did not end the wait")
        var byte: UInt8 = 1
        #expect(write(ends[1], &byte, 1) == 1)
        while outcome.withLock({ $0 == nil }) { try await Task.sleep(for: .milliseconds(5)) }
        #expect(try outcome.withLock { $0 }?.get() == 1, "ended by the byte")
    }

    @Test func aWaitWithNothingToComeEndsAtItsTimeout() throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        var entries = [pollfd(fd: ends[0], events: Int16(POLLIN), revents: 0)]
        let started = ContinuousClock.now
        #expect(try SystemCall.poll(&entries, timeout: .milliseconds(100), subject: "a pipe") == 0)
        #expect(ContinuousClock.now - started >= .milliseconds(100))
    }
}
