#!/usr/bin/env python3
"""A force-feedback input device made with the kernel's uinput driver, for the evdev tests.

It creates /dev/input/eventN with FF_RUMBLE, FF_PERIODIC and FF_GAIN, services the
kernel's upload and erase requests the way a real driver would (accepting them), and
prints one JSON line per thing that happened, timestamped with CLOCK_MONOTONIC:

  {"event": "ready", "node": "/dev/input/event3", "t": ...}
  {"event": "upload", "id": 0, "type": "rumble", "strong": 52428, "weak": 32767, "length": 150, "t": ...}
  {"event": "upload", "id": 1, "type": "periodic", "waveform": "sine", "magnitude": 16383, "period": 20, ...}
  {"event": "gain", "value": 49151, "t": ...}
  {"event": "play", "id": 0, "value": 1, "t": ...}      (value 0: stop)
  {"event": "erase", "id": 0, "t": ...}

--destroy-after-plays N removes the device after the Nth play request (an unplugged
gamepad). Runs until SIGTERM or SIGINT. Needs root (or access to /dev/uinput).
"""
import argparse
import fcntl
import json
import os
import select
import signal
import struct
import sys
import time

UI_DEV_SETUP = 0x405C5503
UI_DEV_CREATE = 0x5501
UI_DEV_DESTROY = 0x5502
UI_SET_EVBIT = 0x40045564
UI_SET_FFBIT = 0x4004556B
UI_BEGIN_FF_UPLOAD = 0xC06855C8
UI_END_FF_UPLOAD = 0x406855C9
UI_BEGIN_FF_ERASE = 0xC00C55CA
UI_END_FF_ERASE = 0x400C55CB
EV_FF = 0x15
EV_UINPUT = 0x0101
UI_FF_UPLOAD = 1
UI_FF_ERASE = 2
FF_RUMBLE = 0x50
FF_PERIODIC = 0x51
FF_SINE = 0x5A
FF_GAIN = 0x60
BUS_VIRTUAL = 0x06
INPUT_EVENT = struct.Struct("llHHi")  # struct input_event on 64-bit: timeval, type, code, value
UPLOAD_SIZE = 104  # struct uinput_ff_upload: request_id, retval, effect (48), old (48)
ERASE = struct.Struct("IiI")  # struct uinput_ff_erase: request_id, retval, effect_id


def emit(event, **fields):
    fields = {"event": event, **fields, "t": time.clock_gettime(time.CLOCK_MONOTONIC)}
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def sysname_ioctl(length):
    return (2 << 30) | (length << 16) | (ord("U") << 8) | 44  # UI_GET_SYSNAME(len)


def describe(effect):
    kind, effect_id, _direction, _button, _interval, length, delay = struct.unpack_from("HhHHHHH", effect, 0)
    fields = {"id": effect_id, "length": length, "delay": delay}
    if kind == FF_RUMBLE:
        strong, weak = struct.unpack_from("HH", effect, 16)
        fields.update(type="rumble", strong=strong, weak=weak)
    elif kind == FF_PERIODIC:
        waveform, period, magnitude = struct.unpack_from("HHh", effect, 16)
        fields.update(type="periodic", waveform="sine" if waveform == FF_SINE else hex(waveform),
                      period=period, magnitude=magnitude)
    else:
        fields.update(type=hex(kind))
    return fields


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="FieldHAL test rumble pad")
    parser.add_argument("--effects", type=int, default=16, help="effect slots (ff_effects_max)")
    parser.add_argument("--destroy-after-plays", type=int, default=0)
    options = parser.parse_args()

    device = os.open("/dev/uinput", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(device, UI_SET_EVBIT, EV_FF)
    for bit in (FF_RUMBLE, FF_PERIODIC, FF_SINE, FF_GAIN):
        fcntl.ioctl(device, UI_SET_FFBIT, bit)
    setup = struct.pack("HHHH80sI", BUS_VIRTUAL, 0x1209, 0xF1E1, 1, options.name.encode(), options.effects)
    fcntl.ioctl(device, UI_DEV_SETUP, setup)
    fcntl.ioctl(device, UI_DEV_CREATE)
    sysname = fcntl.ioctl(device, sysname_ioctl(64), bytes(64)).split(b"\0")[0].decode()
    node = None
    for _ in range(200):  # the event node appears once evdev has bound the new device
        entries = [entry for entry in os.listdir(f"/sys/class/input/{sysname}") if entry.startswith("event")]
        if entries and os.path.exists(f"/dev/input/{entries[0]}"):
            node = f"/dev/input/{entries[0]}"
            break
        time.sleep(0.01)
    emit("ready", node=node, sysname=sysname)

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    plays = 0
    while not stopping:
        try:
            ready, _, _ = select.select([device], [], [], 0.5)
        except InterruptedError:
            continue
        if device not in ready:
            continue
        try:
            data = os.read(device, INPUT_EVENT.size * 64)
        except BlockingIOError:
            continue
        for offset in range(0, len(data) - INPUT_EVENT.size + 1, INPUT_EVENT.size):
            _sec, _usec, kind, code, value = INPUT_EVENT.unpack_from(data, offset)
            if kind == EV_UINPUT and code == UI_FF_UPLOAD:
                upload = bytearray(struct.pack("I", value) + bytes(UPLOAD_SIZE - 4))
                fcntl.ioctl(device, UI_BEGIN_FF_UPLOAD, upload)
                emit("upload", **describe(bytes(upload[8:56])))
                struct.pack_into("i", upload, 4, 0)  # retval: accepted
                fcntl.ioctl(device, UI_END_FF_UPLOAD, bytes(upload))
            elif kind == EV_UINPUT and code == UI_FF_ERASE:
                erase = bytearray(ERASE.pack(value, 0, 0))
                fcntl.ioctl(device, UI_BEGIN_FF_ERASE, erase)
                request_id, _retval, effect_id = ERASE.unpack(erase)
                emit("erase", id=effect_id)
                fcntl.ioctl(device, UI_END_FF_ERASE, ERASE.pack(request_id, 0, effect_id))
            elif kind == EV_FF and code == FF_GAIN:
                emit("gain", value=value)
            elif kind == EV_FF:
                emit("play", id=code, value=value)
                if value:
                    plays += 1
                    if options.destroy_after_plays and plays >= options.destroy_after_plays:
                        fcntl.ioctl(device, UI_DEV_DESTROY)
                        emit("destroyed")
                        os.close(device)
                        return
    fcntl.ioctl(device, UI_DEV_DESTROY)
    os.close(device)


if __name__ == "__main__":
    main()
