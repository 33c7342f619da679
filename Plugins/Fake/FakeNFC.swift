import FieldHAL

/// One scripted tag: what it is, what it holds, and when it is in the field.
struct ScriptedTag: Sendable {
    var type: NFCTagType
    var uid: [UInt8]
    /// A Type 2 tag's data area (TLVs) or a Type 4 tag's NDEF message bytes. A scripted
    /// "corrupt" tag carries bytes here that do not decode.
    var content: [UInt8]
    var arriveMilliseconds: Int
    /// `nil`: the tag stays once it has arrived.
    var leaveMilliseconds: Int?

    func isPresent(atMilliseconds now: Int) -> Bool {
        now >= arriveMilliseconds && (leaveMilliseconds.map { now < $0 } ?? true)
    }
}

/// A reader with tags that arrive and leave on a schedule. Type 2 content goes through
/// the real TLV and NDEF decoders; Type 4 tags are read through the real APDU exchange.
actor FakeNFCReader: NFCReader {
    nonisolated let deviceName: String
    private var tags: [ScriptedTag]
    private let clock = ScriptClock()
    private var closed = false

    init(deviceName: String, tags: [ScriptedTag]) {
        self.deviceName = deviceName
        self.tags = tags
    }

    func readTag(timeout: Duration) async throws -> NFCTag {
        let index = try await waitForTag(timeout: timeout)
        return try read(tags[index])
    }

    func write(_ message: NDEFMessage, timeout: Duration) async throws -> NFCTag {
        let index = try await waitForTag(timeout: timeout)
        guard tags[index].type == .type2 || tags[index].type == .type4 else {
            throw FieldHALError(.unsupported, subject: "nfc \(deviceName)",
                                detail: "tag \(NFCTag(type: tags[index].type, uid: tags[index].uid).uidString) is \(tags[index].type.rawValue), which holds no NDEF")
        }
        do {
            tags[index].content = tags[index].type == .type2 ? try Type2TLV.encodeDataArea(message) : try message.encoded()
        } catch let error as NDEFError {
            throw FieldHALError(.invalidArgument, subject: "nfc \(deviceName)", detail: "\(error)")
        }
        return try read(tags[index])
    }

    private func read(_ tag: ScriptedTag) throws -> NFCTag {
        var result = NFCTag(type: tag.type, uid: tag.uid)
        switch tag.type {
        case .type2:
            result.atqa = 0x0044
            result.sak = 0x00
        case .type4:
            result.atqa = 0x0344
            result.sak = 0x20
        case .mifareClassic:
            result.atqa = 0x0004
            result.sak = 0x08
        case .iso14443a:
            break
        }
        do {
            switch tag.type {
            case .type2:
                result.ndef = try Type2TLV.ndefMessage(inDataArea: tag.content)
            case .type4:
                var card = try Type4TagApplication(message: NDEFMessage(decoding: tag.content))
                result.ndef = try Type4NDEFReader.readMessage { card.respond(to: $0) }
            case .mifareClassic, .iso14443a:
                break
            }
        } catch let error as NDEFError {
            throw FieldHALError(.malformedData, subject: "nfc \(deviceName)", detail: "tag \(result.uidString): \(error)",
                                advice: "rewrite the tag with `fieldhal nfc write`")
        }
        return result
    }

    /// Waits until a scripted tag is in the field; returns its index.
    private func waitForTag(timeout: Duration) async throws -> Int {
        let subject = "nfc \(deviceName)"
        guard !closed else { throw FieldHALError(.disconnected, subject: subject, detail: "reader is closed") }
        let deadline = clock.elapsedMilliseconds + Int(timeout.seconds * 1000)
        while true {
            let now = clock.elapsedMilliseconds
            if let index = tags.firstIndex(where: { $0.isPresent(atMilliseconds: now) }) { return index }
            let nextArrival = tags.map(\.arriveMilliseconds).filter { $0 > now }.min()
            guard let nextArrival, nextArrival <= deadline else {
                try await clock.sleep(untilMilliseconds: deadline, subject: subject)
                throw FieldHALError.timeout(subject, after: timeout, waitingFor: "tag")
            }
            try await clock.sleep(untilMilliseconds: nextArrival, subject: subject)
        }
    }

    func close() { closed = true }
}

/// Tag emulation with a scripted reader: after `read_after_ms` a reader arrives and runs
/// the Type 4 NDEF procedure against the emulated tag, exactly as a phone would.
actor FakeNFCTagEmulator: NFCTagEmulator {
    enum ScriptedReader: String { case reads, absent }

    nonisolated let deviceName: String
    private let reader: ScriptedReader
    private let readAfterMilliseconds: Int
    /// What the scripted reader read last, for tests and the CLI.
    private(set) var lastMessageRead: NDEFMessage?

    init(deviceName: String, reader: ScriptedReader, readAfterMilliseconds: Int) {
        self.deviceName = deviceName
        self.reader = reader
        self.readAfterMilliseconds = readAfterMilliseconds
    }

    func emulate(_ message: NDEFMessage, timeout: Duration) async throws -> EmulationOutcome {
        let subject = "nfc-emulator \(deviceName)"
        var card: Type4TagApplication
        do {
            card = try Type4TagApplication(message: message)
        } catch {
            throw FieldHALError(.invalidArgument, subject: subject, detail: "\(error)")
        }
        let arrives = Duration.milliseconds(readAfterMilliseconds)
        guard reader == .reads, arrives <= timeout else {
            try await sleepCancellable(for: timeout, subject: subject)
            return EmulationOutcome(wasRead: false, commandCount: 0)
        }
        try await sleepCancellable(for: arrives, subject: subject)
        lastMessageRead = try Type4NDEFReader.readMessage { card.respond(to: $0) }
        return EmulationOutcome(wasRead: card.messageWasRead, commandCount: card.commandCount)
    }

    func close() {}
}

