import FieldHAL

/// The duressed kit's tag (Req 32): the kit's NFC emulator presents `trf:duress:<alertId>`
/// to any reader that comes, again and again, until the time is up. Errors end nothing and
/// show nothing (Req 32.5): the emulator is tried again a second later.
public enum DuressTagOffer {
    /// Offers the tag on `emulator` for `window`, or until cancelled. In the daemon the
    /// emulator is the shared chip's background turn, so reads of the chip go first.
    public static func run(alertId: String, for window: Duration, on emulator: any NFCTagEmulator) async {
        guard let message = try? DuressTagPayload.message(alertId: alertId) else { return }
        let deadline = ContinuousClock.now + window
        while ContinuousClock.now < deadline, !Task.isCancelled {
            do {
                _ = try await emulator.emulate(message, timeout: min(deadline - ContinuousClock.now, .seconds(60)))
            } catch {
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }
}
