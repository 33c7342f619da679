import FieldHALVault

/// Which PINs the lock accepts at setup (seed 002's passcode rules, seed 003's 4–6 digits).
public enum PINPolicy {
    public static let lengths = 4...6

    /// Why `pin` cannot be a PIN, in the seed's words; nil when it can. Reads the guarded
    /// bytes in place: no copy of the digits is made.
    public static func problem(with pin: SecretBytes) -> String? {
        pin.withUnsafeBytes { bytes in
            guard lengths.contains(bytes.count), bytes.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
                return "PIN must be 4 to 6 digits"
            }
            var same = true, up = true, down = true
            for index in 1..<bytes.count {
                let step = Int(bytes[index]) - Int(bytes[index - 1])
                same = same && step == 0
                up = up && step == 1
                down = down && step == -1
            }
            if same { return "Passcode cannot be all the same digit" }
            if up || down { return "Passcode cannot be sequential digits" }
            return nil
        }
    }

    public static let mismatch = "Passcodes do not match"

    /// The wrong-PIN counts after which the kit may be set to erase its data: never fewer
    /// than 5 (a few typos must not erase a kit; the lockout has paused attempts for 5
    /// minutes by then), never more than 50 (past that the lockout's hour-long pauses are
    /// the limit that matters).
    public static let wipeAfterFailures = 5...50

    /// Why `count` cannot be the wipe setting; nil when it can.
    public static func problem(wipeAfterFailures count: Int) -> String? {
        wipeAfterFailures.contains(count) ? nil
            : "erase after \(count) wrong PINs: give a number from \(wipeAfterFailures.lowerBound) to \(wipeAfterFailures.upperBound), or off"
    }
}
