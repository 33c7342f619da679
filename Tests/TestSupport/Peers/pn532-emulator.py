#!/usr/bin/python3
"""A PN532 on a pseudo-terminal, for libnfc's pn532_uart driver: no hardware needed.

  pn532-emulator.py [--tag KIND] [--text TEXT] [--uri URI] [--reader MODE] [--link PATH]
                    [--baud N]
  pn532-emulator.py --bridge

Prints the pty's path on the first line of standard output (two lines with --bridge: the
two ptys), then one JSON line per event ("selected", "read", "released", "aborted") with
CLOCK_MONOTONIC nanoseconds, and serves until killed.

What is in the field of the single emulated chip:
  --tag ntag213    an NTAG213 holding an NDEF Text (or URI) record; READ, WRITE, GET_VERSION
  --data-area FILE the NTAG213's data area (pages 4 on, up to 144 bytes) from FILE instead:
                   hex, whitespace and #-comments ignored (a golden tag dump)
  --tag type4      an ISO-DEP card with the NFC Forum Type 4 NDEF application (read-only)
  --tag vanishing  an NTAG213 that leaves the field after its first READ
  --tag corrupt    an NTAG213 whose NDEF TLV claims more bytes than the tag holds
  --tag mute       the chip answers libnfc's set-up, then hangs at the first poll
  --tag none       nothing
  --reader forum   when libnfc puts the chip in target mode, an external reader arrives
                   (after --reader-delay-ms) and runs the NFC Forum Type 4 read
                   procedure against the emulated tag, then leaves ("read" event)
  --baud N         pace every byte as a UART at N baud would (10 bits a byte, both ways):
                   a pty has no wire, so unpaced a read costs only CPU; 115200 is a real
                   PN532's UART, the floor of a read on a bench of real readers
  --bridge         two chips on two ptys, in one field: when one is a target
                   (TgInitAsTarget) the other's InListPassiveTarget finds it, and APDUs
                   are relayed between InDataExchange and TgGetData/TgSetData.

Command list and traps: ../../../../shared/lab-notes.md, section NFC.
"""
import argparse
import json
import os
import pty
import select
import sys
import time
import tty

ACK = bytes([0x00, 0x00, 0xFF, 0x00, 0xFF, 0x00])
STATUS_OK, STATUS_TIMEOUT, STATUS_RELEASED = 0x00, 0x01, 0x29
NDEF_APPLICATION = bytes([0xD2, 0x76, 0x00, 0x00, 0x85, 0x01, 0x01])
SW_OK, SW_NOT_FOUND, SW_WRONG_P = b"\x90\x00", b"\x6a\x82", b"\x6b\x00"
SW_NOT_ALLOWED, SW_UNSUPPORTED = b"\x69\x85", b"\x6d\x00"


MISS_SETUP = False


def emit(event, **fields):
    fields["event"] = event
    fields["t"] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    print(json.dumps(fields), flush=True)


def frame(data):
    """A normal information frame from the PN532 (TFI D5)."""
    body = bytes([0xD5]) + data
    length = len(body)
    return bytes([0x00, 0x00, 0xFF, length, (-length) & 0xFF]) + body + bytes([(-sum(body)) & 0xFF, 0x00])


def ndef_record(text=None, uri=None):
    if uri is not None:
        payload = bytes([0x00]) + uri.encode()            # URI record, no abbreviation
        return bytes([0xD1, 0x01, len(payload), 0x55]) + payload
    payload = bytes([0x02]) + b"en" + text.encode()
    return bytes([0xD1, 0x01, len(payload), 0x54]) + payload


# --- Tags in the field (initiator mode) -------------------------------------------------

class Type2Tag:
    """An NTAG213: 45 pages of 4 bytes (UID, lock bytes, CC, 144-byte data area)."""
    atqa, sak, ats = b"\x00\x44", 0x00, b""

    def __init__(self, uid, ndef=None, data_area=None, vanish_after_reads=None):
        self.uid = uid
        memory = bytearray(45 * 4)
        memory[0:9] = bytes([uid[0], uid[1], uid[2], 0x88 ^ uid[0] ^ uid[1] ^ uid[2],
                             uid[3], uid[4], uid[5], uid[6], uid[3] ^ uid[4] ^ uid[5] ^ uid[6]])
        memory[12:16] = bytes([0xE1, 0x10, 0x12, 0x00])   # CC: NDEF 1.0, 144 bytes, read/write
        area = data_area if data_area is not None else bytes([0x03, len(ndef)]) + ndef + b"\xfe"
        memory[16:16 + len(area)] = area
        self.memory = memory
        self.reads_left = vanish_after_reads
        self.present = True

    def command(self, command):
        """One tag command (CRC handled by the chip): (PN532 status, reply)."""
        if not self.present or not command:
            return STATUS_TIMEOUT, b""
        pages = len(self.memory) // 4
        if command[0] == 0x30 and len(command) >= 2:       # READ: 4 pages, wrapping
            if command[1] >= pages:
                return STATUS_TIMEOUT, b""                 # a NAK: the PN532 reports a timeout
            out = b"".join(bytes(self.memory[((command[1] + i) % pages) * 4:][:4]) for i in range(4))
            if self.reads_left is not None:
                self.reads_left -= 1
                if self.reads_left <= 0:
                    self.present = False                   # gone once this answer is out
            return STATUS_OK, out
        if command[0] == 0xA2 and len(command) >= 6:       # WRITE one page
            if 4 <= command[1] < pages - 2:
                self.memory[command[1] * 4:command[1] * 4 + 4] = command[2:6]
                return STATUS_OK, b""
            return STATUS_TIMEOUT, b""
        if command[0] == 0x60:                             # GET_VERSION: NTAG213
            return STATUS_OK, bytes([0x00, 0x04, 0x04, 0x02, 0x01, 0x00, 0x0F, 0x03])
        return STATUS_TIMEOUT, b""


class Type4Card:
    """An ISO-DEP card with the NFC Forum Type 4 NDEF application (mapping 2.0)."""
    atqa, sak = b"\x03\x44", 0x20
    ats = bytes([0x06, 0x75, 0x77, 0x81, 0x02, 0x80])    # TL counts itself

    def __init__(self, uid, ndef):
        self.uid = uid
        self.present = True
        self.files = {
            b"\xe1\x03": bytes([0x00, 0x0F, 0x20, 0x00, 0x3B, 0x00, 0x34, 0x04, 0x06, 0xE1, 0x04,
                                0x00, 0xFF, 0x00, 0xFF]),
            b"\xe1\x04": bytes([len(ndef) >> 8, len(ndef) & 0xFF]) + ndef,
        }
        self.application = False
        self.file = None

    def command(self, apdu):
        if not self.present:
            return STATUS_TIMEOUT, b""
        if len(apdu) < 4 or apdu[0] != 0x00:
            return STATUS_OK, SW_UNSUPPORTED
        ins, p1, p2 = apdu[1], apdu[2], apdu[3]
        if ins == 0xA4:                                    # SELECT
            data = apdu[5:5 + apdu[4]] if len(apdu) > 4 else b""
            if p1 == 0x04:
                self.application = data == NDEF_APPLICATION
                self.file = None
                return STATUS_OK, SW_OK if self.application else SW_NOT_FOUND
            if p1 == 0x00 and self.application and bytes(data) in self.files:
                self.file = bytes(data)
                return STATUS_OK, SW_OK
            return STATUS_OK, SW_NOT_FOUND
        if ins == 0xB0:                                    # READ BINARY
            if self.file is None:
                return STATUS_OK, SW_NOT_ALLOWED
            content = self.files[self.file]
            offset = (p1 << 8) | p2
            length = apdu[4] if len(apdu) > 4 else 256
            if offset > len(content):
                return STATUS_OK, SW_WRONG_P
            return STATUS_OK, content[offset:offset + min(length or 256, 0x3B)] + SW_OK
        return STATUS_OK, SW_UNSUPPORTED


# --- An external reader (target mode) ---------------------------------------------------

def forum_reader():
    """The NFC Forum Type 4 read procedure, as a generator: yields C-APDUs, is sent the
    R-APDUs, returns the NDEF message. Raises ValueError on any unexpected answer."""
    def body(response, step):
        if len(response) < 2 or response[-2:] != SW_OK:
            raise ValueError(f"{step}: {response.hex()}")
        return response[:-2]
    body((yield b"\x00\xa4\x04\x00\x07" + NDEF_APPLICATION + b"\x00"), "select application")
    body((yield b"\x00\xa4\x00\x0c\x02\xe1\x03"), "select CC")
    cc = body((yield b"\x00\xb0\x00\x00\x0f"), "read CC")
    mle = max(1, min((cc[3] << 8) | cc[4], 0xFF))
    body((yield b"\x00\xa4\x00\x0c\x02" + cc[9:11]), "select NDEF file")
    nlen = body((yield b"\x00\xb0\x00\x00\x02"), "read NLEN")
    length = (nlen[0] << 8) | nlen[1]
    ndef = b""
    while len(ndef) < length:
        offset = 2 + len(ndef)
        chunk = body((yield bytes([0x00, 0xB0, offset >> 8, offset & 0xFF, min(mle, length - len(ndef))])), "read NDEF")
        if not chunk:
            raise ValueError("empty READ BINARY")
        ndef += chunk
    return ndef


class ScriptedReader:
    """Plays a reader against a chip in target mode: activates it, then feeds APDUs."""

    def __init__(self, delay_ms):
        self.delay = delay_ms / 1000.0
        self.script = None
        self.next_apdu = None
        self.done = False

    def activate(self):
        self.script = forum_reader()
        self.next_apdu = next(self.script)

    def response(self, rapdu):
        try:
            self.next_apdu = self.script.send(rapdu)
        except StopIteration as stop:
            self.next_apdu, self.done = None, True
            emit("read", ndef=stop.value.hex())
        except ValueError as error:
            self.next_apdu, self.done = None, True
            emit("read-failed", reason=str(error))


# --- The chip ----------------------------------------------------------------------------

# Seconds per byte on the wire (--baud); 0 leaves the pty unpaced.
BYTE_SECONDS = 0.0


def on_the_wire(count):
    if BYTE_SECONDS:
        time.sleep(count * BYTE_SECONDS)


class Chip:
    def __init__(self, name, master, field):
        self.name = name
        self.master = master
        self.field = field              # what the antenna sees: Field or Bridge side
        self.registers = {}
        self.pending = None             # a command whose answer waits for the field
        self.hung = False
        self.missed_setup = False
        self.buffer = bytearray()

    def reply(self, data):
        self.send(ACK + frame(data))

    def ack_only(self):
        self.send(ACK)

    def complete(self, data):
        """The answer to the pending command, which was ACKed when it arrived."""
        self.pending = None
        self.send(frame(data))

    def send(self, data):
        on_the_wire(len(data))
        os.write(self.master, data)

    def receive(self, chunk):
        """Splits the byte stream into frames: ACKs (aborts) and commands."""
        buffer = self.buffer
        buffer += chunk
        while True:
            start = buffer.find(b"\x00\xff")
            if start < 0:
                del buffer[:-1]
                return
            del buffer[:start]
            if len(buffer) < 4:
                return
            if buffer[2] == 0x00 and buffer[3] == 0xFF:    # a host ACK: abort what is pending
                del buffer[:4]
                if self.pending is not None:
                    emit("aborted", chip=self.name, command=self.pending)
                    self.pending = None
                    self.field.aborted(self)
                continue
            length = buffer[2]
            if (length + buffer[3]) & 0xFF != 0:
                del buffer[:2]
                continue
            if len(buffer) < 5 + length:
                return
            body = bytes(buffer[4:4 + length])
            del buffer[:5 + length]
            if body and body[0] == 0xD4:
                self.command(body[1], body[2:])

    def command(self, command, data):
        if self.hung:
            return                                       # not even an ACK
        if MISS_SETUP and command == 0x32 and data == b"\x01\x00" and not self.missed_setup:
            self.missed_setup = True                     # the initiator set-up's first RFConfiguration
            emit("missed-setup", chip=self.name)
            return
        if command == 0x14:             # SAMConfiguration
            return self.reply(b"\x15")
        if command == 0x00:             # Diagnose: echo the test data
            return self.reply(b"\x01" + data)
        if command == 0x02:             # GetFirmwareVersion: PN532 v1.6
            return self.reply(b"\x03\x32\x01\x06\x07")
        if command == 0x06:             # ReadRegister: 16-bit addresses
            values = [self.registers.get((data[i] << 8) | data[i + 1], 0) for i in range(0, len(data) - 1, 2)]
            return self.reply(b"\x07" + bytes(values))
        if command == 0x08:             # WriteRegister: address, value triples
            for i in range(0, len(data) - 2, 3):
                self.registers[(data[i] << 8) | data[i + 1]] = data[i + 2]
            return self.reply(b"\x09")
        if command == 0x16:             # PowerDown
            return self.reply(b"\x17\x00")
        if command in (0x4A, 0x60, 0x40, 0x42) and self.field.is_mute(self):
            self.hung = True                             # from the first poll on
            emit("hung", chip=self.name)
            return
        answer = self.field.command(self, command, data)
        if answer is None:              # the field answers later
            self.pending = command
            self.ack_only()
        else:
            self.reply(answer)


def target_reply(tag):
    uid = tag.uid
    return bytes([0x01]) + tag.atqa + bytes([tag.sak, len(uid)]) + uid + tag.ats


class Field:
    """The field of one chip: a tag for initiator mode, a scripted reader for target mode."""

    def __init__(self, tag, reader, mute):
        self.tag = tag
        self.reader = reader
        self.mute = mute
        self.selected = False
        self.timers = []                # (when, action)

    def is_mute(self, chip):
        return self.mute

    def aborted(self, chip):
        self.timers.clear()

    def command(self, chip, command, data):
        tag = self.tag
        if command == 0x4A:             # InListPassiveTarget: MaxTg, BrTy (0 = ISO 14443-A)
            self.selected = False       # a new poll drops the previous target
            if tag is None or not tag.present or len(data) < 2 or data[1] != 0x00:
                return b"\x4b\x00"
            self.selected = True
            emit("selected", chip=chip.name, uid=tag.uid.hex())
            return b"\x4b\x01" + target_reply(tag)
        if command == 0x60:             # InAutoPoll: count, period, target types
            if tag is None or not tag.present or not any(kind in (0x00, 0x10, 0x20) for kind in data[2:]):
                return b"\x61\x00"
            self.selected = True
            emit("selected", chip=chip.name, uid=tag.uid.hex())
            target = target_reply(tag)
            return bytes([0x61, 0x01, 0x10 if tag.sak == 0 else 0x20, len(target)]) + target
        if command in (0x44, 0x52):     # InDeselect, InRelease
            self.selected = False
            return bytes([command + 1, 0x00])
        if command in (0x40, 0x42):     # InDataExchange (target number first), InCommunicateThru
            if not self.selected or tag is None or (command == 0x42 and isinstance(tag, Type4Card)):
                return bytes([command + 1, STATUS_TIMEOUT])   # raw frames get no ISO-DEP answer
            status, reply = tag.command(data[1:] if command == 0x40 else data)
            return bytes([command + 1, status]) + reply
        if command == 0x8C:             # TgInitAsTarget: wait for the scripted reader
            if self.reader is None or self.reader.done:
                return None
            self.timers.append((time.monotonic() + self.reader.delay, lambda: self.activate(chip)))
            return None
        if command == 0x86:             # TgGetData
            reader = self.reader
            if reader is None or reader.next_apdu is None:
                emit("released", chip=chip.name)
                return bytes([0x87, STATUS_RELEASED])
            return bytes([0x87, STATUS_OK]) + reader.next_apdu
        if command == 0x8E:             # TgSetData: the tag's R-APDU
            if self.reader is not None and self.reader.next_apdu is not None:
                self.reader.response(data)
            return b"\x8f\x00"
        return bytes([command + 1])     # RFConfiguration, SetParameters, …: empty success

    def activate(self, chip):
        if chip.pending != 0x8C:
            return
        self.reader.activate()
        emit("activated", chip=chip.name)
        chip.complete(b"\x8d\x08\xe0\x80")  # 106 kbps ISO 14443-4 PICC; the reader sent RATS

    def tick(self):
        now = time.monotonic()
        due = [action for when, action in self.timers if when <= now]
        self.timers = [(when, action) for when, action in self.timers if when > now]
        for action in due:
            action()

    def next_deadline(self):
        return min((when for when, _ in self.timers), default=None)


class Bridge:
    """One field shared by two chips: a target on one is found by the other's poll."""

    def __init__(self):
        self.chips = []
        self.link = None                # {"initiator", "target", "apdus", "released"}

    def is_mute(self, chip):
        return False

    def other(self, chip):
        return self.chips[1] if chip is self.chips[0] else self.chips[0]

    def aborted(self, chip):
        link = self.link
        if link and link["target"] is chip:             # the tag left: the reader's exchange fails
            self.link = None
            initiator = link["initiator"]
            if initiator.pending == 0x40:
                initiator.complete(bytes([0x41, STATUS_TIMEOUT]))

    def command(self, chip, command, data):
        other = self.other(chip)
        link = self.link
        if command == 0x8C:             # TgInitAsTarget: present to the other chip's field
            chip.target_parameters = data
            self.link = None
            return None
        if command == 0x4A:             # InListPassiveTarget
            if other.pending != 0x8C or len(data) < 2 or data[1] != 0x00:
                return b"\x4b\x00"
            params = other.target_parameters
            atqa = bytes([params[2], params[1]])           # libnfc sends SENS_RES swapped
            uid = bytes([0x08]) + params[3:6]
            ats = bytes([0x05, 0x75, 0x33, 0x92, 0x03])
            other.complete(b"\x8d\x08\xe0\x80")
            self.link = {"initiator": chip, "target": other, "apdus": [], "released": False}
            emit("selected", chip=chip.name, uid=uid.hex())
            return bytes([0x4B, 0x01, 0x01]) + atqa + bytes([params[6], len(uid)]) + uid + ats
        if command == 0x40:             # InDataExchange: relay the C-APDU
            if not link or link["initiator"] is not chip:
                return bytes([0x41, STATUS_TIMEOUT])
            target = link["target"]
            if target.pending == 0x86:
                target.complete(bytes([0x87, STATUS_OK]) + data[1:])
            else:
                link["apdus"].append(data[1:])
            return None
        if command == 0x86:             # TgGetData
            if not link or link["target"] is not chip:
                return bytes([0x87, STATUS_RELEASED])
            if link["apdus"]:
                return bytes([0x87, STATUS_OK]) + link["apdus"].pop(0)
            if link["released"]:
                self.link = None
                emit("released", chip=chip.name)
                return bytes([0x87, STATUS_RELEASED])
            return None
        if command == 0x8E:             # TgSetData: relay the R-APDU
            if link and link["target"] is chip and link["initiator"].pending == 0x40:
                link["initiator"].complete(bytes([0x41, STATUS_OK]) + data)
            return b"\x8f\x00"
        if command in (0x44, 0x52):     # InDeselect, InRelease: the reader lets go
            if link and link["initiator"] is chip:
                link["released"] = True
                target = link["target"]
                if target.pending == 0x86:
                    self.link = None
                    emit("released", chip=target.name)
                    target.complete(bytes([0x87, STATUS_RELEASED]))
            return bytes([command + 1, 0x00])
        if command == 0x60:
            return b"\x61\x00"
        return bytes([command + 1])

    def tick(self):
        pass

    def next_deadline(self):
        return None


def open_pty(link=None):
    master, slave = pty.openpty()
    tty.setraw(slave)                   # libnfc sets the line up too; raw from the start
    tty.setraw(master)
    path = os.ttyname(slave)
    if link:                            # a stable name, like a udev symlink: replaced atomically
        temporary = f"{link}.{os.getpid()}"
        os.symlink(path, temporary)
        os.replace(temporary, link)
    # The slave end stays open here: if every slave descriptor closes, reads on the
    # master fail with EIO until libnfc opens it again.
    return master, slave, path


def serve(chips, field):
    by_fd = {chip.master: chip for chip in chips}
    while True:
        deadline = field.next_deadline()
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select(list(by_fd), [], [], wait)
        for fd in ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                continue
            on_the_wire(len(chunk))
            by_fd[fd].receive(chunk)
        field.tick()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tag", default="ntag213",
                        choices=["ntag213", "type4", "vanishing", "corrupt", "mute", "none"])
    parser.add_argument("--text", default="trf:duress:demo-alert-1")
    parser.add_argument("--uri")
    parser.add_argument("--reader", choices=["forum", "none"], default="none")
    parser.add_argument("--reader-delay-ms", type=int, default=100)
    parser.add_argument("--link", help="also reach the pty through this symlink")
    parser.add_argument("--bridge", action="store_true")
    parser.add_argument("--baud", type=int, default=0)
    parser.add_argument("--data-area", help="the NTAG213's data area, in hex, from this file")
    parser.add_argument("--miss-setup", action="store_true",
                        help="answer nothing (not even an ACK) to the first RF field-off of an initiator set-up, "
                             "as a PN532 woken from power-down misses the first command")
    options = parser.parse_args()
    global BYTE_SECONDS, MISS_SETUP
    BYTE_SECONDS = 10 / options.baud if options.baud > 0 else 0.0
    MISS_SETUP = options.miss_setup

    if options.bridge:
        field = Bridge()
        ptys = [open_pty(), open_pty()]
        field.chips = [Chip(name, master, field) for name, (master, _, _) in zip("ab", ptys)]
        for _, _, path in ptys:
            print(path, flush=True)
        return serve(field.chips, field)

    ndef = ndef_record(options.text, options.uri)
    uid7 = bytes([0x04, 0xA1, 0xB2, 0xC3, 0xD4, 0xE5, 0xF6])
    if options.data_area:
        with open(options.data_area) as dump:
            area = bytes.fromhex("".join(line.split("#")[0] for line in dump).replace(" ", "").replace("\n", ""))
        if len(area) > 144:
            sys.exit("pn532-emulator.py: %s holds %d bytes; an NTAG213's data area holds 144" % (options.data_area, len(area)))
        options.tag = "dump"
    tag = {
        "dump": lambda: Type2Tag(uid7, data_area=area),
        "ntag213": lambda: Type2Tag(uid7, ndef),
        "vanishing": lambda: Type2Tag(uid7, ndef, vanish_after_reads=1),
        # NDEF TLV with a 3-byte length of 400: more than the 144-byte data area.
        "corrupt": lambda: Type2Tag(uid7, data_area=bytes([0x03, 0xFF, 0x01, 0x90]) + ndef),
        "type4": lambda: Type4Card(bytes([0x04, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66]), ndef),
        "mute": lambda: None,
        "none": lambda: None,
    }[options.tag]()
    reader = ScriptedReader(options.reader_delay_ms) if options.reader == "forum" else None
    field = Field(tag, reader, mute=options.tag == "mute")
    master, _, path = open_pty(options.link)
    print(options.link or path, flush=True)
    serve([Chip("a", master, field)], field)


if __name__ == "__main__":
    main()
