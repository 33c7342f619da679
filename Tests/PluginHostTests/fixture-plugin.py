#!/usr/bin/env python3
"""A plugin process for the plugin host's tests: it speaks the plugin protocol's handshake
(docs/plugin-protocol.md) well, or fails in the way its first argument names."""
import json
import os
import sys
import threading
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "good"
manifest = json.load(open(sys.argv[2]))
# "flaky": the first process serves three fixes and dies; every later one dies as its
# stream is asked for, so every restart fails half-way through being set up.
starts_file = os.path.join(os.path.dirname(sys.argv[2]), "starts")
with open(starts_file, "a") as starts:
    starts.write("start\n")
first_start = sum(1 for _ in open(starts_file)) == 1
if mode == "flaky":
    mode = "die-after-fixes" if first_start else "die-in-watch"


lock = threading.Lock()
stop_streams = threading.Event()
locks = []  # "exclusive": the devices this process holds
devices = {}  # protocol 1.6: the host's handle of each open device -> its tty
streams = {}  # gps.watch's streams: number -> (the device's handle, its stop event)


def text_record(text):
    """One NDEF Text record ("en"), base64, as nfc.read answers it."""
    import base64
    payload = b"\x02en" + text.encode()
    return base64.b64encode(bytes([0xD1, 1, len(payload)]) + b"T" + payload).decode()


def unknown_device(ident, params):
    """1.6: a request naming a device that is not open is notConfigured."""
    handle = params.get("device")
    if handle is None or handle in devices:
        return False
    send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": "not open",
          "data": {"kind": "notConfigured", "detail": "no device %s is open" % handle}}})
    return True


def send(message):
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def stream_fixes(stream, tty, stopped):
    """Synthetic fixes every 50 ms, each a little further north; the modes spoil them. A
    receiver whose tty ends in a digit D is at longitude 10 + D (two receivers told apart),
    any other at 13.4."""
    count = 0
    longitude = 10.0 + int(tty[-1]) if tty and tty[-1].isdigit() else 13.4
    while not stop_streams.is_set() and not stopped.is_set():
        count += 1
        if mode == "die-after-fixes" and count > 3:
            sys.stderr.write("fixture: receiver fell over after %d fixes\n" % (count - 1))
            sys.stderr.flush()
            os._exit(3)
        # "bad-fix": every fifth fix is out of range, so that a watcher who starts late
        # (a loaded machine) still meets one.
        latitude = 200.0 if (mode == "bad-fix" and count % 5 == 2) else 52.0 + count / 1000.0
        fix = {"mode": "3d", "latitude": latitude, "longitude": longitude, "altitude": 34.0,
               "horizontalAccuracy": 4.5, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "satellitesUsed": 7}
        send({"jsonrpc": "2.0", "method": "gps.fix", "params": {"stream": stream, "fix": fix}})
        time.sleep(0.05)


for line in sys.stdin:
    request = json.loads(line)
    method, ident = request.get("method"), request.get("id")
    if method == "initialize":
        host = request["params"]["protocol"]
        if mode == "crash":
            sys.stderr.write("fixture: cannot open /dev/ttyFIXTURE: no such device\n")
            sys.stderr.flush()
            os.abort()
        if mode == "silent":
            time.sleep(3600)
        if mode == "garbage":
            sys.stdout.write("this is not JSON\n")
            sys.stdout.flush()
            continue
        if mode == "huge":
            sys.stdout.write("[" + "1," * (1 << 20) + "1]\n")
            sys.stdout.flush()
            continue
        if mode == "refuse":
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": "no receiver",
                  "data": {"kind": "deviceNotFound", "detail": "no receiver on /dev/ttyFIXTURE", "advice": "plug it in"}}})
            continue
        served = sorted(manifest["capabilities"].keys())
        if mode == "liar":
            served = ["camera"]
        major = manifest["protocol"]["major"] + (1 if mode == "newer-major" else 0)
        send({"jsonrpc": "2.0", "id": ident, "result": {
            "name": manifest["name"], "version": manifest["version"],
            "protocol": {"major": major, "minor": manifest["protocol"]["minor"]},
            "capabilities": served, "host_protocol_seen": host}})
    elif method == "open":
        params = request["params"]
        if mode == "hang-open":
            continue
        if params["capability"] not in ("gps", "nfc", "nfc_emulator", "biometrics", "haptics"):
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": "only gps, nfc, biometrics and haptics"}})
            continue
        if mode == "exclusive":
            # A device only one process may hold, as a serial reader is: a lock on a file.
            import fcntl
            held = open(os.path.join(os.path.dirname(sys.argv[2]), "lock-" + os.path.basename(params["parameters"]["device"])), "w")
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": "busy",
                      "data": {"kind": "busy", "detail": "another process holds " + params["parameters"]["device"]}}})
                continue
            locks.append(held)
        # What each process opened and closed, in order: "PID open nfc" (1.6: "PID open nfc nfc-1").
        handle = params.get("device")
        with open(os.path.join(os.path.dirname(sys.argv[2]), "opens"), "a") as opens:
            opens.write("%d open %s%s\n" % (os.getpid(), params["capability"], " " + handle if handle else ""))
        result = {"device": "fixture " + params["parameters"].get("device", params["capability"])}
        if handle is not None:
            devices[handle] = params["parameters"].get("device", params["capability"])
            result["identity"] = {"vendor": "Fixture Labs", "model": "probe reader",
                                  "serial": os.path.basename(devices[handle])}
        send({"jsonrpc": "2.0", "id": ident, "result": result})
    elif method == "close":
        handle = request["params"].get("device")
        with open(os.path.join(os.path.dirname(sys.argv[2]), "opens"), "a") as opens:
            opens.write("%d close %s%s\n" % (os.getpid(), request["params"]["capability"], " " + handle if handle else ""))
        devices.pop(handle, None)
        for number, (owner, stopped) in list(streams.items()):
            if owner == handle:  # a closed device's stream ends with it
                stopped.set()
                del streams[number]
        send({"jsonrpc": "2.0", "id": ident, "result": None})
    elif method == "nfc.emulate":
        send({"jsonrpc": "2.0", "id": ident, "result": {"wasRead": True, "commandCount": 4}})
    elif method == "nfc.read":
        # "die-in-read": the first process dies during its first read; later ones serve.
        if mode == "die-in-read" and first_start:
            sys.stderr.write("fixture: reader fell over mid-read\n")
            sys.stderr.flush()
            os._exit(5)
        if mode == "hang-read":
            continue
        if unknown_device(ident, request.get("params", {})):
            continue
        if mode == "stray" and first_start:
            # An answer to a request the host never sent: the protocol's fault, at once.
            send({"jsonrpc": "2.0", "id": 9999, "result": {"tag": None}})
            time.sleep(3600)
        tag = {"type": "type2", "uid": "04:A1:B2:C3:D4:E5:F6", "atqa": "0044", "sak": "00",
               # One NDEF Text record, "en", "fixture" (1.6: "fixture" and the reader's tty).
               "ndef": "0QEKVAJlbmZpeHR1cmU="}
        handle = request.get("params", {}).get("device")
        if handle is not None:
            tag["ndef"] = text_record("fixture " + devices[handle])
        if mode == "bad-tag":
            tag["uid"] = "zz"
        send({"jsonrpc": "2.0", "id": ident, "result": {"tag": tag}})
    elif method == "haptics.play":
        # "slow-theme": this plugin's named patterns are long (its warning plays 6 s in two
        # steps), longer than FieldHAL's own theme's plus the host's 5 s grace, and it says
        # what it played. "bad-played": it says nonsense. Any other mode answers null.
        def play(request, seconds):
            time.sleep(seconds)
            result = None
            if mode == "slow-theme":
                result = {"steps": 2, "milliseconds": int(seconds * 1000)}
            elif mode == "bad-played":
                result = {"steps": 0, "milliseconds": "soon"}
            send({"jsonrpc": "2.0", "id": request, "result": result})
        if unknown_device(ident, request.get("params", {})):
            continue
        named = "pattern" in request["params"]
        threading.Thread(target=play, args=(ident, 6.0 if (mode == "slow-theme" and named) else 0.05), daemon=True).start()
    elif method == "biometrics.availability":
        send({"jsonrpc": "2.0", "id": ident, "result": {"hasSensor": True, "enrolledFingers": ["right-index-finger"]}})
    elif method == "biometrics.verify":
        result = {"result": "retry", "reason": "finger-not-centered"} if mode == "retry" else {"result": "match"}
        send({"jsonrpc": "2.0", "id": ident, "result": result})
    elif method == "biometrics.enroll":
        def progress(request, value):
            send({"jsonrpc": "2.0", "method": "$/progress", "params": {"id": request, "value": value}})
        # A step for a request that is not running: the host must ignore it.
        progress(ident + 1000, {"stage": "passed", "number": 9})
        progress(ident, {"stage": "passed", "number": 1})
        progress(ident, {"stage": "retry", "reason": "swipe-too-short"})
        if mode == "bad-stage":
            progress(ident, {"stage": "halfway"})
            continue  # and never answers: the host must cancel it
        progress(ident, {"stage": "passed", "number": 2})
        progress(ident, {"stage": "completed"})
        send({"jsonrpc": "2.0", "id": ident, "result": None})
    elif method == "gps.watch":
        if mode == "die-in-watch":
            os._exit(4)
        if unknown_device(ident, request.get("params", {})):
            continue
        # Each stream's number is its request's id, as the Swift SDK numbers them.
        handle = request.get("params", {}).get("device")
        stopped = threading.Event()
        streams[ident] = (handle, stopped)
        send({"jsonrpc": "2.0", "id": ident, "result": {"stream": ident}})
        threading.Thread(target=stream_fixes, args=(ident, devices.get(handle), stopped), daemon=True).start()
    elif method == "$/cancel":
        with open(os.path.join(os.path.dirname(sys.argv[2]), "cancels"), "a") as cancels:
            cancels.write("%d\n" % request["params"]["id"])
    elif method == "shutdown":
        stop_streams.set()
        send({"jsonrpc": "2.0", "id": ident, "result": None})
    elif method == "exit":
        if mode != "linger":
            sys.exit(0)
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "method not found: %s" % method}})
