#!/usr/bin/python3
"""A PN532 on a pseudo-terminal, for libnfc's pn532_uart driver: no hardware needed.

  pn532-emulator.py [--tag ntag213|none] [--text TEXT]

Prints the pty's path on the first line of standard output, then serves until killed.
Initiator mode with one simulated NFC Forum Type 2 tag (an NTAG213 holding an NDEF Text
record), enough for nfc-list, nfc-poll and nfc-mfultralight to read it. Command list and
traps: ../../../../shared/lab-notes.md, section NFC.
"""
import argparse
import os
import pty
import select
import sys
import termios
import tty

ACK = bytes([0x00, 0x00, 0xFF, 0x00, 0xFF, 0x00])


def frame(data):
    """A normal information frame from the PN532 (TFI D5)."""
    body = bytes([0xD5]) + data
    length = len(body)
    return bytes([0x00, 0x00, 0xFF, length, (-length) & 0xFF]) + body + bytes([(-sum(body)) & 0xFF, 0x00])


def ntag213(uid, text):
    """45 pages of 4 bytes: UID and check bytes, lock bytes, capability container, NDEF TLV."""
    memory = bytearray(45 * 4)
    bcc0 = 0x88 ^ uid[0] ^ uid[1] ^ uid[2]
    bcc1 = uid[3] ^ uid[4] ^ uid[5] ^ uid[6]
    memory[0:9] = bytes([uid[0], uid[1], uid[2], bcc0, uid[3], uid[4], uid[5], uid[6], bcc1])
    memory[12:16] = bytes([0xE1, 0x10, 0x12, 0x00])  # CC: NDEF 1.0, 144 bytes, read/write
    payload = bytes([0x02]) + b"en" + text.encode()
    record = bytes([0xD1, 0x01, len(payload), 0x54]) + payload
    tlv = bytes([0x03, len(record)]) + record + bytes([0xFE])
    memory[16:16 + len(tlv)] = tlv
    return memory


class PN532:
    def __init__(self, tag):
        self.tag = tag                  # bytearray of pages, or None
        self.uid = bytes(tag[0:3] + tag[4:8]) if tag else b""
        self.registers = {}
        self.selected = False

    def answer(self, command, data):
        if command == 0x14:             # SAMConfiguration
            return bytes([0x15])
        if command == 0x00:             # Diagnose: echo the test data
            return bytes([0x01]) + data
        if command == 0x02:             # GetFirmwareVersion: PN532 v1.6
            return bytes([0x03, 0x32, 0x01, 0x06, 0x07])
        if command == 0x12:             # SetParameters
            return bytes([0x13])
        if command == 0x06:             # ReadRegister: 16-bit addresses
            values = [self.registers.get((data[i] << 8) | data[i + 1], 0) for i in range(0, len(data), 2)]
            return bytes([0x07]) + bytes(values)
        if command == 0x08:             # WriteRegister: address, value triples
            for i in range(0, len(data) - 2, 3):
                self.registers[(data[i] << 8) | data[i + 1]] = data[i + 2]
            return bytes([0x09])
        if command == 0x32:             # RFConfiguration
            return bytes([0x33])
        if command == 0x4A:             # InListPassiveTarget: MaxTg, BrTy (0 = ISO 14443-A)
            if self.tag is None or len(data) < 2 or data[1] != 0x00:
                return bytes([0x4B, 0x00])
            self.selected = True
            return bytes([0x4B, 0x01, 0x01, 0x00, 0x44, 0x00, len(self.uid)]) + self.uid
        if command == 0x44:             # InDeselect
            return bytes([0x45, 0x00])
        if command == 0x52:             # InRelease
            self.selected = False
            return bytes([0x53, 0x00])
        if command == 0x40:             # InDataExchange: target number, then the tag command
            status, reply = self.tag_command(data[1:])
            return bytes([0x41, status]) + reply
        if command == 0x42:             # InCommunicateThru
            status, reply = self.tag_command(data)
            return bytes([0x43, status]) + reply
        if command == 0x60:             # InAutoPoll: count, period, target types
            if self.tag is None or not any(kind in (0x00, 0x10) for kind in data[2:]):
                return bytes([0x61, 0x00])
            target = bytes([0x01, 0x00, 0x44, 0x00, len(self.uid)]) + self.uid
            return bytes([0x61, 0x01, 0x10, len(target)]) + target
        return bytes([command + 1])     # anything else: an empty success

    def tag_command(self, command):
        if not self.selected or not command:
            return 0x01, b""            # timeout: no tag answers
        if command[0] == 0x30:          # READ: 4 pages from the given one, wrapping
            start = command[1]
            pages = len(self.tag) // 4
            if start >= pages:
                return 0x01, b""
            out = b"".join(bytes(self.tag[((start + i) % pages) * 4:((start + i) % pages) * 4 + 4]) for i in range(4))
            return 0x00, out
        if command[0] == 0xA2 and len(command) >= 6:   # WRITE one page
            page = command[1]
            if 4 <= page < len(self.tag) // 4:
                self.tag[page * 4:page * 4 + 4] = command[2:6]
                return 0x00, b""
            return 0x01, b""
        if command[0] == 0x60:          # GET_VERSION: NTAG213
            return 0x00, bytes([0x00, 0x04, 0x04, 0x02, 0x01, 0x00, 0x0F, 0x03])
        return 0x01, b""


def serve(master, emulator):
    buffer = bytearray()
    while True:
        select.select([master], [], [])
        try:
            chunk = os.read(master, 4096)
        except OSError:
            continue
        buffer += chunk
        while True:
            start = buffer.find(b"\x00\xff")
            if start < 0:
                del buffer[:-1]
                break
            del buffer[:start]
            if len(buffer) < 4:
                break
            if buffer[2] == 0x00 and buffer[3] == 0xFF:      # a host ACK (abort): skip
                del buffer[:4]
                continue
            length = buffer[2]
            if (length + buffer[3]) & 0xFF != 0:
                del buffer[:2]
                continue
            if len(buffer) < 5 + length:
                break
            body = bytes(buffer[4:4 + length])
            del buffer[:5 + length]
            if not body or body[0] != 0xD4:
                continue
            reply = emulator.answer(body[1], body[2:])
            os.write(master, ACK + frame(reply))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", default="ntag213", choices=["ntag213", "none"])
    parser.add_argument("--text", default="trf:duress:demo-alert-1")
    options = parser.parse_args()
    master, slave = pty.openpty()
    tty.setraw(slave)                   # libnfc sets the line up too; raw from the start
    attributes = termios.tcgetattr(master)
    tty.setraw(master)
    del attributes
    tag = ntag213(bytes([0x04, 0xA1, 0xB2, 0xC3, 0xD4, 0xE5, 0xF6]), options.text) if options.tag == "ntag213" else None
    print(os.ttyname(slave), flush=True)
    # The slave end stays open here: if every slave descriptor closes, reads on the
    # master fail with EIO until libnfc opens it again.
    serve(master, PN532(tag))


if __name__ == "__main__":
    main()
