import Foundation
import Testing
import TransrifyLabServer

/// The lab server speaks plain HTTP, hands out a demo key and shows every session's verdict:
/// it must not listen where other machines reach it unless a lab says so (issue 18).
@Suite struct LabServerExposureTests {
    @Test(arguments: ["127.0.0.1", "127.42.0.9", "::1", "localhost"])
    func loopbackAddressesAreServed(_ host: String) throws {
        #expect(LabServer.Configuration.isLoopback(host))
        var configuration = LabServer.Configuration(directory: NSTemporaryDirectory() + "fieldhal-lab-\(UUID().uuidString)")
        configuration.host = host
        _ = try LabServer(configuration)
    }

    @Test(arguments: ["0.0.0.0", "::", "192.168.1.20", "10.0.2.15", "fe80::1", "lab.example", "128.0.0.1"])
    func otherAddressesAreRefusedWithTheReason(_ host: String) throws {
        #expect(!LabServer.Configuration.isLoopback(host))
        var configuration = LabServer.Configuration(directory: NSTemporaryDirectory() + "fieldhal-lab-\(UUID().uuidString)")
        configuration.host = host
        let refusal = #expect(throws: LabServer.ConfigurationError.self) { try LabServer(configuration) }
        #expect(refusal?.description.contains("refusing to listen on \(host)") == true)
        #expect(refusal?.description.contains("--insecure-public-lab") == true)
        #expect(!FileManager.default.fileExists(atPath: configuration.directory), "a refused server made its state directory")
    }

    @Test func aClosedLabNetworkMayAskForAPublicAddress() async throws {
        var configuration = LabServer.Configuration(directory: NSTemporaryDirectory() + "fieldhal-lab-\(UUID().uuidString)")
        configuration.host = "0.0.0.0"
        configuration.insecurePublicLab = true
        let running = try await LabServer(configuration).start()
        #expect(running.port > 0)
        await running.stop()
    }
}
