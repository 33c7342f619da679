import Foundation
import Testing
import TestSupport

/// `fieldhal-labserver` as a lab runs it.
@Suite struct LabServerCLITests {
    static let binary = CLI.products.appendingPathComponent("fieldhal-labserver")

    @Test func aPublicAddressIsRefusedWithUsageExitAndTheWayOut() async throws {
        let directory = CLI.freshStateDirectory()
        let result = try await offPool {
            try CLI.runBlocking(["serve", "--host", "0.0.0.0", "--port", "0", "--directory", directory], executable: Self.binary)
        }
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains("refusing to listen on 0.0.0.0"), "\(result.stderr)")
        #expect(result.stderr.contains("--insecure-public-lab"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: directory))
    }

    @Test func helpSaysWhyAndHowToAllowIt() async throws {
        let result = try await offPool { try CLI.runBlocking(["serve", "--help"], executable: Self.binary) }
        #expect(result.status == 0)
        #expect(result.stdout.contains("--insecure-public-lab"), "\(result.stdout)")
    }
}
