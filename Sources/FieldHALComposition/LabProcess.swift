import FieldHAL
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `fieldhal-labserver` as a child process: seeded, listening on a free port.
public final class LabProcess: @unchecked Sendable {
    public let process: Process
    public let baseURL: URL
    public let tenantKey: String, customerRef: String, pin: String, duressPin: String
    /// The server's state: `lab.sqlite` and the uploaded objects under `objects/`.
    public let directory: String

    public static func start(directory: String) throws -> LabProcess {
        let executable = URL(fileURLWithPath: (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
            .deletingLastPathComponent().appendingPathComponent("fieldhal-labserver").path
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw FieldHALError(.unavailable, subject: "demo", detail: "\(executable) is missing", advice: "build it: swift build")
        }
        let seed = try run(executable, ["seed", "--directory", directory])
        func value(after prefix: String) -> String? {
            seed.split(separator: "\n").first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
        }
        guard let tenantKey = value(after: "tenant key: "),
              let user = seed.split(separator: "\n").first(where: { $0.hasPrefix("user ") }) else {
            throw FieldHALError(.protocolError, subject: "demo", detail: "fieldhal-labserver seed printed no tenant and user")
        }
        // "user alice01: PIN 2468, duress PIN 1357"
        let words = user.replacingOccurrences(of: ":", with: "").replacingOccurrences(of: ",", with: "").split(separator: " ").map(String.init)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["serve", "--directory", directory, "--port", "0"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        guard let text = Self.readLine(output.fileHandleForReading) else {
            throw FieldHALError(.unavailable, subject: "demo", detail: "fieldhal-labserver exited before listening")
        }
        guard let address = text.split(separator: " ").last, let url = URL(string: String(address)) else {
            throw FieldHALError(.protocolError, subject: "demo", detail: "unexpected line from fieldhal-labserver: \(text)")
        }
        return LabProcess(process: process, baseURL: url, tenantKey: tenantKey, customerRef: words[1], pin: words[3], duressPin: words[6],
                          directory: directory)
    }

    /// A child's next line of output, without its newline, read a byte at a time so that
    /// nothing after it is taken from the pipe; nil when the child ended first.
    public static func readLine(_ handle: FileHandle) -> String? {
        var line = [UInt8]()
        while line.last != 10 {
            guard let byte = handle.readData(ofLength: 1).first else { return nil }
            line.append(byte)
        }
        return String(decoding: line.dropLast(), as: UTF8.self)
    }

    private init(process: Process, baseURL: URL, tenantKey: String, customerRef: String, pin: String, duressPin: String, directory: String) {
        self.process = process
        self.directory = directory
        self.baseURL = baseURL
        (self.tenantKey, self.customerRef, self.pin, self.duressPin) = (tenantKey, customerRef, pin, duressPin)
    }

    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    private static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}
