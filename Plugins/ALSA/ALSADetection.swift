#if ALSA
import CALSA
import FieldHAL

/// The machine's sound cards for `fieldhal detect`: every PCM device of every card
/// (snd_card_next, snd_ctl_pcm_next_device), as a microphone where it captures and a
/// speaker where it plays, named by the card's id (`plughw:CARD=Loopback,DEV=0`), which
/// stays the same when cards are numbered differently after a replug or a reboot.
enum ALSADetection {
    static func devices() -> [DetectedDevice] {
        fieldhal_alsa_silence_library_errors()
        var found: [DetectedDevice] = []
        var card: Int32 = -1
        while snd_card_next(&card) == 0, card >= 0 {
            var control: OpaquePointer?
            guard snd_ctl_open(&control, "hw:\(card)", 0) == 0, let control else { continue }
            defer { snd_ctl_close(control) }
            var info: OpaquePointer?
            snd_ctl_card_info_malloc(&info)
            defer { snd_ctl_card_info_free(info) }
            guard snd_ctl_card_info(control, info) == 0 else { continue }
            let id = String(cString: snd_ctl_card_info_get_id(info)), name = String(cString: snd_ctl_card_info_get_name(info))
            let driver = String(cString: snd_ctl_card_info_get_driver(info))
            var device: Int32 = -1
            while snd_ctl_pcm_next_device(control, &device) == 0, device >= 0 {
                for (stream, capability) in [(SND_PCM_STREAM_CAPTURE, Capability.microphone), (SND_PCM_STREAM_PLAYBACK, .speaker)] {
                    var pcmInfo: OpaquePointer?
                    snd_pcm_info_malloc(&pcmInfo)
                    defer { snd_pcm_info_free(pcmInfo) }
                    snd_pcm_info_set_device(pcmInfo, UInt32(device))
                    snd_pcm_info_set_subdevice(pcmInfo, 0)
                    snd_pcm_info_set_stream(pcmInfo, stream)
                    guard snd_ctl_pcm_info(control, pcmInfo) == 0 else { continue }
                    let pcmName = String(cString: snd_pcm_info_get_name(pcmInfo))
                    // plughw converts rate and format: the plugin records 16 kHz mono
                    // whatever the card's native format is.
                    let stable = "plughw:CARD=\(id),DEV=\(device)"
                    found.append(DetectedDevice(capability: capability, plugin: "alsa", name: "\(name): \(pcmName)",
                                                node: "hw:\(card),\(device)", stableName: stable,
                                                details: ["driver": driver, "card": "\(card) (\(id))", "device": "\(device)"],
                                                parameters: ["pcm": .string(stable)]))
                }
            }
        }
        return found
    }
}
#endif
