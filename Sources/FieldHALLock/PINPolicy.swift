/// Which PINs the lock accepts at setup (seed 002's passcode rules, seed 003's 4–6 digits).
public enum PINPolicy {
    public static let lengths = 4...6

    /// Why `pin` cannot be a PIN, in the seed's words; nil when it can.
    public static func problem(with pin: String) -> String? {
        let digits = pin.utf8.map { Int($0) - 48 }
        guard lengths.contains(digits.count), digits.allSatisfy({ (0...9).contains($0) }) else {
            return "PIN must be 4 to 6 digits"
        }
        if Set(digits).count == 1 { return "Passcode cannot be all the same digit" }
        let steps = zip(digits.dropFirst(), digits).map { $0 - $1 }
        if steps.allSatisfy({ $0 == 1 }) || steps.allSatisfy({ $0 == -1 }) { return "Passcode cannot be sequential digits" }
        return nil
    }

    public static let mismatch = "Passcodes do not match"
}
