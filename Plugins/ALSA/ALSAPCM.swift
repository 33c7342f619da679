#if ALSA
import CALSA
import FieldHAL
import FieldHALSystem
import SystemPackage
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// An open ALSA PCM in non-blocking mode: a thin, typed layer over alsa-lib. Every wait is a
/// `poll` on the PCM's descriptors plus a wake-up pipe, with a timeout, so a stalled or
/// vanished device ends in a typed error and a cancelled task returns at once. One device
/// thread owns it.
final class ALSAPCM {
    enum Direction { case capture, playback }

    let name: String
    let subject: String
    private let handle: OpaquePointer
    private let direction: Direction
    private(set) var sampleRate = 0
    private(set) var channels = 0
    private(set) var format = SampleFormat.s16le
    private var closed = false

    private static let silenceOnce: Void = fieldhal_alsa_silence_library_errors()

    init(name: String, direction: Direction, subject: String) throws {
        _ = Self.silenceOnce
        self.name = name
        self.subject = subject
        self.direction = direction
        var pcm: OpaquePointer?
        let stream = direction == .capture ? SND_PCM_STREAM_CAPTURE : SND_PCM_STREAM_PLAYBACK
        let result = snd_pcm_open(&pcm, name, stream, SND_PCM_NONBLOCK)
        guard result == 0, let pcm else { throw Self.error(result, subject: subject, doing: "open") }
        handle = pcm
    }

    deinit { close() }

    /// What the PCM plays or records on: its card's name and driver (ALSA's card info), the
    /// USB descriptor's vendor and serial, and the card's id-based name, which stays the same
    /// when cards are numbered differently after a replug or a reboot. Nil for a PCM on no
    /// card (`default` through a sound server, `null`).
    func identity() -> DeviceIdentity? {
        var info: OpaquePointer?
        guard snd_pcm_info_malloc(&info) == 0, let info else { return nil }
        defer { snd_pcm_info_free(info) }
        guard snd_pcm_info(handle, info) == 0 else { return nil }
        let card = snd_pcm_info_get_card(info), device = snd_pcm_info_get_device(info)
        guard card >= 0 else { return nil }
        var control: OpaquePointer?
        guard snd_ctl_open(&control, "hw:\(card)", 0) == 0, let control else { return nil }
        defer { snd_ctl_close(control) }
        var cardInfo: OpaquePointer?
        guard snd_ctl_card_info_malloc(&cardInfo) == 0, let cardInfo else { return nil }
        defer { snd_ctl_card_info_free(cardInfo) }
        guard snd_ctl_card_info(control, cardInfo) == 0 else { return nil }
        let id = String(cString: snd_ctl_card_info_get_id(cardInfo))
        // The driver names the vendor only when the bus does not (snd-aloop, a PCI codec).
        let said = DeviceIdentity(vendor: String(cString: snd_ctl_card_info_get_driver(cardInfo)),
                                  model: String(cString: snd_ctl_card_info_get_name(cardInfo)), link: "hw:CARD=\(id),DEV=\(device)")
        return DeviceIdentity.usb(above: "/sys/class/sound/card\(card)/device")?.filled(from: said) ?? said
    }

    func close() {
        guard !closed else { return }
        closed = true
        snd_pcm_close(handle)
    }

    /// Interleaved access at the given format and channels, and at `sampleRate` exactly
    /// (a plug PCM such as `default` resamples; a raw `hw:` device that cannot is refused
    /// rather than silently recorded at another rate). Period and buffer near the asked times.
    func configure(format: SampleFormat, channels: Int, sampleRate: Int,
                   period: Duration = .milliseconds(20), buffer: Duration = .milliseconds(200)) throws {
        var parameters: OpaquePointer?
        try check(snd_pcm_hw_params_malloc(&parameters), "allocate hardware parameters")
        defer { snd_pcm_hw_params_free(parameters) }
        try check(snd_pcm_hw_params_any(handle, parameters), "read hardware parameters")
        try check(snd_pcm_hw_params_set_access(handle, parameters, SND_PCM_ACCESS_RW_INTERLEAVED), "set interleaved access")
        let alsaFormat = format == .s16le ? SND_PCM_FORMAT_S16_LE : SND_PCM_FORMAT_S32_LE
        guard snd_pcm_hw_params_set_format(handle, parameters, alsaFormat) == 0 else {
            throw FieldHALError(.unsupported, subject: subject, detail: "the device cannot use \(format.rawValue)",
                                advice: "use another format, or a plug: PCM that converts")
        }
        guard snd_pcm_hw_params_set_channels(handle, parameters, UInt32(channels)) == 0 else {
            throw FieldHALError(.unsupported, subject: subject, detail: "the device cannot use \(channels) channel(s)",
                                advice: "ask for the channels it has, or use a plug: PCM")
        }
        var rate = UInt32(sampleRate)
        var direction: Int32 = 0
        try check(snd_pcm_hw_params_set_rate_near(handle, parameters, &rate, &direction), "set rate")
        guard rate == UInt32(sampleRate) else {
            throw FieldHALError(.unsupported, subject: subject, detail: "the device cannot run at \(sampleRate) Hz (nearest \(rate) Hz)",
                                advice: "ask for \(rate) Hz, or use a plug: PCM (such as default) that resamples")
        }
        var periodMicroseconds = UInt32(period.seconds * 1e6)
        var bufferMicroseconds = UInt32(buffer.seconds * 1e6)
        _ = snd_pcm_hw_params_set_period_time_near(handle, parameters, &periodMicroseconds, &direction)
        _ = snd_pcm_hw_params_set_buffer_time_near(handle, parameters, &bufferMicroseconds, &direction)
        try check(snd_pcm_hw_params(handle, parameters), "apply hardware parameters")
        try check(snd_pcm_prepare(handle), "prepare")
        self.sampleRate = sampleRate
        self.channels = channels
        self.format = format
    }

    var bytesPerFrame: Int { channels * format.bytesPerSample }

    enum Transfer { case frames(Int), xrun }

    /// Waits (at most `timeout`, or until `wakeup`) for the device to be ready, then reads
    /// or writes up to `frames` frames. An overrun or underrun is recovered here and
    /// reported as `.xrun` so the caller can count it.
    func transfer(_ buffer: UnsafeMutableRawPointer, frames: Int, timeout: Duration, wakeup: WakeupEvent) throws -> Transfer {
        try waitUntilReady(timeout: timeout, wakeup: wakeup)
        let result: Int = direction == .capture
            ? snd_pcm_readi(handle, buffer, snd_pcm_uframes_t(frames))
            : snd_pcm_writei(handle, buffer, snd_pcm_uframes_t(frames))
        if result >= 0 { return .frames(result) }
        let code = Int32(result)
        if code == -EAGAIN { return .frames(0) }
        if code == -EPIPE || code == -ESTRPIPE {
            try check(snd_pcm_recover(handle, code, 1), "recover from an \(direction == .capture ? "overrun" : "underrun")")
            if direction == .capture { _ = snd_pcm_start(handle) }
            return .xrun
        }
        throw Self.error(code, subject: subject, doing: direction == .capture ? "read" : "write")
    }

    /// Starts capture (playback starts by itself once the buffer has data).
    func start() throws {
        try check(snd_pcm_start(handle), "start")
    }

    /// Lets what has been written play out, waiting in `poll` so cancellation stops it at
    /// once (then the rest is dropped).
    func drain(timeout: Duration, wakeup: WakeupEvent) throws {
        let result = snd_pcm_drain(handle)
        if result == 0 { return }
        guard result == -EAGAIN else { throw Self.error(result, subject: subject, doing: "drain") }
        let deadline = ContinuousClock.now + timeout
        while snd_pcm_state(handle) == SND_PCM_STATE_DRAINING {
            guard ContinuousClock.now < deadline else {
                _ = snd_pcm_drop(handle)
                throw FieldHALError.timeout(subject, after: timeout, waitingFor: "end of playback")
            }
            do {
                try waitUntilReady(timeout: .milliseconds(50), wakeup: wakeup, timeoutIsError: false)
            } catch {
                _ = snd_pcm_drop(handle)
                throw error
            }
        }
    }

    private func waitUntilReady(timeout: Duration, wakeup: WakeupEvent, timeoutIsError: Bool = true) throws {
        let count = Int(snd_pcm_poll_descriptors_count(handle))
        guard count > 0 else { throw Self.error(-EIO, subject: subject, doing: "get poll descriptors") }
        var entries = [pollfd](repeating: pollfd(), count: count + 1)
        let filled = entries.withUnsafeMutableBufferPointer { snd_pcm_poll_descriptors(handle, $0.baseAddress, UInt32(count)) }
        guard filled >= 0 else { throw Self.error(filled, subject: subject, doing: "get poll descriptors") }
        entries[count] = pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0)
        let deadline = ContinuousClock.now + timeout
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero {
                if !timeoutIsError { return }
                throw FieldHALError(.timeout, subject: subject, detail: "no \(direction == .capture ? "audio" : "room for audio") within \(timeout.secondsDescription)",
                                    advice: "the device has stopped (or another program holds its clock); check it with arecord -l")
            }
            for index in entries.indices { entries[index].revents = 0 }
            let ready: Int
            switch SystemCall.poll(&entries, timeout: remaining) {
            case .success(let count): ready = count
            case .failure(let code): throw Self.error(-code.rawValue, subject: subject, doing: "wait")
            }
            if entries[count].revents != 0 { throw FieldHALError.cancelled(subject) }
            if ready == 0 { continue }
            var revents: UInt16 = 0
            let demangled = entries.withUnsafeMutableBufferPointer {
                snd_pcm_poll_descriptors_revents(handle, $0.baseAddress, UInt32(count), &revents)
            }
            if demangled < 0 { throw Self.error(demangled, subject: subject, doing: "wait") }
            if snd_pcm_state(handle) == SND_PCM_STATE_DISCONNECTED {
                throw Self.error(-ENODEV, subject: subject, doing: "wait")
            }
            // POLLERR means an xrun or a suspend: the transfer call reports and recovers it.
            if revents & UInt16(POLLIN | POLLOUT | POLLERR) != 0 { return }
        }
    }

    private func check(_ result: Int32, _ step: String) throws {
        if result < 0 { throw Self.error(result, subject: subject, doing: step) }
    }

    /// A negative alsa-lib result as a typed error with advice.
    static func error(_ result: Int32, subject: String, doing step: String) -> FieldHALError {
        let detail = "\(step): \(String(cString: snd_strerror(result)))"
        // At open, "no such device" means the name is wrong or the card is absent; later,
        // that the card went away.
        let absent = -result == ENOENT || (step == "open" && [ENODEV, ENXIO].contains(-result))
        switch absent ? ENOENT : -result {
        case ENOENT:
            return FieldHALError(.deviceNotFound, subject: subject, detail: "no such PCM or sound card",
                                 advice: "aplay -L lists the PCM names, arecord -l the cards; set pcm in the configuration")
        case EACCES, EPERM:
            return FieldHALError(.permissionDenied, subject: subject, detail: "permission denied",
                                 advice: "add the service user to group audio or install udev/60-fieldhal.rules")
        case EBUSY:
            return FieldHALError(.busy, subject: subject, detail: "\(step): the device is busy",
                                 advice: "another program holds it (fuser -v /dev/snd/*); use a dsnoop/dmix PCM to share it")
        case ENODEV, ENXIO, EBADFD:
            return FieldHALError(.disconnected, subject: subject, detail: "\(step): the sound device went away",
                                 advice: "check the cable or the USB audio adapter; the next recording opens it again")
        case EINVAL:
            return FieldHALError(.unsupported, subject: subject, detail: detail)
        default:
            return FieldHALError(.io, subject: subject, detail: detail)
        }
    }
}
#endif
