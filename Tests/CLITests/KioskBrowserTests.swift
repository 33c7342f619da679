import Foundation
import TestSupport
import Testing

/// The example kiosk (issue 45) in Debian's chromium, headless, against the daemon's web door
/// on the fake kit: `lab/kiosk-browser` loads the page from its own origin, reads the scripted
/// tags, gets the haptics and sound, decodes the camera's still, resumes its stream after the
/// daemon restarts, is refused from another origin and after its token is revoked.
/// Screenshots in logs/kiosk.
@Suite("The kiosk in a browser")
struct KioskBrowserTests {
    static let hasBrowser = ["/usr/bin/chromium", "/usr/bin/chromedriver"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }

    @Test(.enabled(if: hasBrowser, "needs chromium and chromium-driver (lab/packages test)"))
    func theExampleKioskWorksInABrowser() async throws {
        let report = NSTemporaryDirectory() + "fieldhal-kiosk-\(UUID().uuidString).json"
        defer { try? FileManager.default.removeItem(atPath: report) }
        let result = try await CLI.runTool("/usr/bin/python3", [CLI.repositoryRoot.appendingPathComponent("lab/kiosk-browser").path,
                                                               "--fieldhal", CLI.binary.path, "--json", report])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let checks = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: report))) as? [String: Any]
        let list = checks?["checks"] as? [[String: Any]] ?? []
        #expect(list.count == 13 && list.allSatisfy { $0["passed"] as? Bool == true }, "\(list)")
    }
}
