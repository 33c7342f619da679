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
}
