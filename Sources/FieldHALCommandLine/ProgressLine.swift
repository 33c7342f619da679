import ArgumentParser
import Foundation
import Synchronization

/// `--progress`, for the commands whose work takes long (uploads, recordings).
public struct ProgressOptions: ParsableArguments, Sendable {
    @Flag(name: .long, help: "Report progress on standard error even when it is not a terminal (as JSON lines with --json).")
    public var progress = false

    public init() {}
}

/// Progress of long work, on standard error so that standard output stays the result:
/// at a terminal one line rewritten in place (done, total, rate, time left) and cleared at
/// the end; when asked for (`--progress`) where standard error is not a terminal, a line
/// per second — a JSON object per line with `--json`. Otherwise nothing.
public final class ProgressLine: Sendable {
    public enum Unit: String, Sendable { case bytes, seconds }

    private struct State {
        let started = ContinuousClock.now
        var lastShown: ContinuousClock.Instant?
        var drewInPlace = false
    }

    private let label: String
    private let total: Double?
    private let unit: Unit
    private let json: Bool
    private let inPlace: Bool
    private let state = Mutex(State())

    /// nil when nothing is to be shown: standard error is not a terminal and nobody asked.
    public init?(_ label: String, total: Double?, unit: Unit, json: Bool, asked: Bool) {
        let terminal = isatty(STDERR_FILENO) == 1
        guard terminal || asked else { return nil }
        self.label = label
        self.total = total
        self.unit = unit
        self.json = json
        inPlace = terminal && !json
    }

    /// Reports `done` units so far; shown at most 4 times a second in place, once a second
    /// as lines. `force` shows it whatever the time (the last update).
    public func update(_ done: Double, force: Bool = false) {
        let now = ContinuousClock.now
        let text: String? = state.withLock { state in
            let interval: Duration = inPlace ? .milliseconds(250) : .seconds(1)
            if !force, let last = state.lastShown, now - last < interval { return nil }
            state.lastShown = now
            let elapsed = Self.seconds(now - state.started)
            let rate = elapsed > 0.2 ? done / elapsed : nil
            let left = total.flatMap { total in rate.flatMap { $0 > 0 ? max(0, total - done) / $0 : nil } }
            if inPlace { state.drewInPlace = true }
            return json ? jsonLine(done: done, rate: rate, left: left) : textLine(done: done, rate: rate, left: left)
        }
        guard let text else { return }
        FileHandle.standardError.write(Data((inPlace ? "\r\u{1B}[K" + text : text + "\n").utf8))
    }

    /// Clears the in-place line, so the command's own last words stand alone.
    public func finish() {
        if state.withLock({ $0.drewInPlace }) { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }

    private func textLine(done: Double, rate: Double?, left: Double?) -> String {
        // Seconds done count up whole (a tenth would flicker); a total of 1.5 s is 1.5 s.
        var parts = ["\(label): \(amount(unit == .seconds ? done.rounded(.down) : done))" + (total.map { " of \(amount($0))" + ($0 > 0 ? " (\(Int(done / $0 * 100)) %)" : "") } ?? "")]
        if unit == .bytes, let rate { parts.append("\(amount(rate))/s") }
        if let left { parts.append("\(Int(left.rounded(.up))) s left") }
        return parts.joined(separator: ", ")
    }

    private func jsonLine(done: Double, rate: Double?, left: Double?) -> String {
        var fields: [String: Any] = ["label": label, "done": done, "unit": unit.rawValue]
        if let total { fields["total"] = total }
        if let rate, unit == .bytes { fields["rate"] = (rate * 10).rounded() / 10 }
        if let left { fields["remainingSeconds"] = (left * 10).rounded() / 10 }
        let data = (try? JSONSerialization.data(withJSONObject: ["progress": fields], options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    private func amount(_ value: Double) -> String {
        switch unit {
        case .seconds: return value == value.rounded() ? "\(Int(value)) s" : String(format: "%.1f s", value)
        case .bytes:
            let units = ["B", "KiB", "MiB", "GiB"]
            var scaled = value, index = 0
            while scaled >= 1024, index < units.count - 1 { scaled /= 1024; index += 1 }
            return index == 0 ? "\(Int(value)) B" : String(format: "%.1f", scaled) + " " + units[index]
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Shows time-based progress for `seconds` of work while `body` runs (a recording).
    public static func whileRunning<T: Sendable>(_ label: String, seconds: Double, json: Bool, asked: Bool,
                                                 _ body: () async throws -> T) async throws -> T {
        guard let line = ProgressLine(label, total: seconds, unit: .seconds, json: json, asked: asked) else { return try await body() }
        let ticker = Task {
            let started = ContinuousClock.now
            while !Task.isCancelled {
                line.update(min(seconds, Self.seconds(ContinuousClock.now - started)))
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
        defer {
            ticker.cancel()
            line.finish()
        }
        return try await body()
    }
}
