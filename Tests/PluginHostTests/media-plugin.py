#!/usr/bin/env python3
"""A camera, microphone and speaker plugin for the plugin host's tests (protocol 1.3 to
1.5, as its manifest says; standard library only): bulk bytes travel as descriptors beside the messages
(docs/plugin-protocol.md, "Descriptors"). It serves them well, or gets them wrong in the
way its first argument names."""
import fcntl
import json
import os
import socket
import struct
import sys
import threading
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "good"
manifest = json.load(open(sys.argv[2]))
here = os.path.dirname(sys.argv[2])
channel = socket.socket(fileno=0)  # standard input and output are one socket pair
lock = threading.Lock()

# An 8x8 mid-grey baseline JPEG (cjpeg -grayscale of a flat PGM; djpeg decodes it).
JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300080606070605080707070909080a0c140d"
    "0c0b0b0c1912130f141d1a1f1e1d1a1c1c20242e2720222c231c1c2837292c30313434341f27393d3832"
    "3c2e333432ffc0000b080008000801011100ffc40014000100000000000000000000000000000000ffc4"
    "0014100100000000000000000000000000000000ffda0008010100003f003fffd9")


def send(message, fds=()):
    data = (json.dumps(message) + "\n").encode()
    with lock:
        if fds:
            sent = socket.send_fds(channel, [data], list(fds))
            data = data[sent:]
        if data:
            channel.sendall(data)


def answer(ident, result, fds=()):
    send({"jsonrpc": "2.0", "id": ident, "result": result}, fds)


def log(name, text):
    with open(os.path.join(here, name), "a") as out:
        out.write(text + "\n")


def sealed(data, seal=True):
    fd = os.memfd_create("fixture", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    return fd


def wav(rate, frames):
    data = b"\0\0" * frames
    return (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16) + b"data" + struct.pack("<I", len(data)) + data)


def record(ident, params, fds, result):
    """Writes the recording into the directory the host passed, through its descriptor, or
    (protocol 1.4, "into": "file") into the file it passed."""
    if mode != "no-file":
        if params.get("into") == "file":
            os.ftruncate(fds[0], 0)
            os.lseek(fds[0], 0, os.SEEK_SET)
            out = os.fdopen(os.dup(fds[0]), "wb")
        else:
            out = os.fdopen(os.open(params["file"], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=fds[0]), "wb")
        with out:
            out.write(wav(48000, 480) if params["file"].endswith(".wav") else b"RIFF....AVI ")
    for fd in fds:
        os.close(fd)
    answer(ident, result)


def record_segments(ident, params, result, data):
    """Protocol 1.5, "into": "segments": each segment a sealed memfd beside a $/progress of
    the request, then the answer counting them; or wrong in the way the mode names."""
    count = -(-params["durationMs"] // params["segmentMs"])
    order = list(range(count))
    if mode == "segments-out-of-order":
        order[0], order[1] = order[1], order[0]
    for number in order:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        fd = sealed(data, seal=mode != "segments-unsealed")
        send({"jsonrpc": "2.0", "method": "$/progress", "params": {"id": ident, "fds": 1, "value": {"segment": {
            "sequence": number, "startedAt": when, "seconds": params["segmentMs"] / 1000, "recording": result}}}}, [fd])
        os.close(fd)
    answer(ident, {"segments": count + (1 if mode == "segments-miscounted" else 0)})


buffered = b""
waiting = []  # descriptors received, for the message that names them
while True:
    data, fds, _, _ = socket.recv_fds(channel, 65536, 4)
    waiting += fds
    if not data:
        break
    buffered += data
    while b"\n" in buffered:
        line, buffered = buffered.split(b"\n", 1)
        request = json.loads(line)
        method, ident, params = request.get("method"), request.get("id"), request.get("params") or {}
        count = params.get("fds", 0)
        mine, waiting = waiting[:count], waiting[count:]
        if method == "initialize":
            answer(ident, {"name": manifest["name"], "version": manifest["version"],
                           "protocol": manifest["protocol"], "capabilities": sorted(manifest["capabilities"].keys())})
        elif method == "open":
            log("opens", "%d open %s" % (os.getpid(), params["capability"]))
            answer(ident, {"device": "media " + params["capability"]})
        elif method == "close":
            answer(ident, None)
        elif method == "camera.formats":
            answer(ident, {"formats": [{"pixelFormat": "MJPG", "width": 8, "height": 8, "framesPerSecond": [30, 15]}]})
        elif method == "camera.still":
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            result = {"width": 8, "height": 8, "capturedAt": when, "fds": 1}
            if mode == "no-fds":
                answer(ident, result)
            elif mode == "unsealed":
                answer(ident, result, [sealed(JPEG, seal=False)])
            elif mode == "not-jpeg":
                answer(ident, result, [sealed(b"<html>not a picture</html>")])
            elif mode == "extra-fds":
                answer(ident, result, [sealed(JPEG)] * 5)
            else:
                answer(ident, result, [sealed(JPEG)])
        elif method in ("camera.record", "microphone.record") and params.get("into") == "segments":
            if method == "camera.record":
                record_segments(ident, params, {"width": 8, "height": 8, "frames": 30, "durationSeconds": 1.0, "bytes": 12}, b"RIFF....AVI ")
            else:
                record_segments(ident, params, {"sampleRate": 48000, "channels": 1, "format": "S16_LE", "frames": 480,
                                                "peakDBFS": -160.0, "rmsDBFS": -160.0}, wav(48000, 480))
        elif method == "camera.record":
            record(ident, params, mine, {"width": 8, "height": 8, "frames": 30, "durationSeconds": 1.0, "bytes": 12})
        elif method == "microphone.record":
            if mode == "slow-record":
                time.sleep(60)  # never answers in time: the host cancels or the test ends it
            record(ident, params, mine, {"sampleRate": 48000, "channels": 1, "format": "S16_LE", "frames": 480,
                                         "peakDBFS": -160.0, "rmsDBFS": -160.0})
        elif method == "speaker.play":
            # What arrived: the sample count and their sum, for the test to compare.
            size = os.fstat(mine[0]).st_size
            samples = struct.unpack("<%dh" % (size // 2), os.pread(mine[0], size, 0))
            log("played", "%s %d %d %d" % (params["name"], params["sampleRate"], len(samples), sum(samples)))
            for fd in mine:
                os.close(fd)
            answer(ident, None)
        elif method == "$/cancel":
            log("cancels", str(params["id"]))
        elif method == "shutdown":
            answer(ident, None)
        elif method == "exit":
            sys.exit(0)
        elif ident is not None:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "method not found: %s" % method}})
