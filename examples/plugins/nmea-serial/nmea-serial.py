#!/usr/bin/env python3
"""FieldHAL's reference external plugin: location from a GNSS receiver read straight from
its serial port (NMEA 0183), for kits that do not run gpsd. Standard library only.

It speaks FieldHAL's plugin protocol 1.0 (docs/plugin-protocol.md): JSON-RPC 2.0, one
message per line on stdin/stdout; stderr is its log. It serves one capability, gps:
`open` opens the tty (raw, at `baud`), `gps.watch` starts a stream of `gps.fix`
notifications, one per receiver epoch, and `gps.lost` when the receiver goes away (it is
reopened every second until it is back).

An epoch's sentences (GGA, GSA, RMC… in the receiver's own order) are merged, and the fix
is sent when the epoch's last sentence arrives: the last sentence type of the first whole
epoch is remembered as the one that ends every epoch (as gpsd does), so no fix waits for
the next epoch's first sentence. Sentences with a wrong checksum are dropped.
"""
import json
import os
import sys
import termios
import threading
import time
import tty

NAME, VERSION, PROTOCOL = "nmea-serial", "1.0.0", {"major": 1, "minor": 0}
SPEEDS = {4800: termios.B4800, 9600: termios.B9600, 19200: termios.B19200,
          38400: termios.B38400, 57600: termios.B57600, 115200: termios.B115200}
KNOT = 0.514444  # metres per second
UERE = 5.0       # metres per unit of HDOP: a consumer receiver's usual range error

output_lock = threading.Lock()


def send(message):
    with output_lock:
        sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def log(text):
    sys.stderr.write("nmea-serial: %s\n" % text)
    sys.stderr.flush()


class PluginError(Exception):
    def __init__(self, kind, detail, advice=None):
        super().__init__(detail)
        self.kind, self.detail, self.advice = kind, detail, advice


# --- NMEA ---------------------------------------------------------------------------

def checked(line):
    """The sentence's fields when its checksum is right, else None."""
    line = line.strip()
    if not line.startswith("$") or "*" not in line:
        return None
    body, _, checksum = line[1:].partition("*")
    total = 0
    for character in body:
        total ^= ord(character)
    try:
        if total != int(checksum[:2], 16):
            return None
    except ValueError:
        return None
    return body.split(",")


def degrees(value, hemisphere):
    if not value or hemisphere not in ("N", "S", "E", "W"):
        return None
    whole, _, _ = value.partition(".")
    head = len(whole) - 2
    result = float(value[:head] or 0) + float(value[head:]) / 60.0
    return -result if hemisphere in ("S", "W") else result


def number(value):
    try:
        return float(value) if value else None
    except ValueError:
        return None


class Epoch:
    """What one receiver epoch's sentences said."""

    def __init__(self, clock):
        self.clock = clock  # hhmmss.ss, as the sentences carry it
        self.fields = {}
        self.emitted = False

    def fix(self, date):
        f = self.fields
        quality, status, gsa_mode = f.get("quality"), f.get("status"), f.get("gsa_mode")
        has_position = f.get("latitude") is not None and f.get("longitude") is not None
        if status == "V" or quality == 0 or gsa_mode == 1 or not has_position:
            mode = "no-fix"
        elif gsa_mode in (2, 3):
            mode = "2d" if gsa_mode == 2 else "3d"
        else:
            mode = "3d" if f.get("altitude") is not None else "2d"
        fix = {"mode": mode, "time": timestamp(f.get("date") or date, self.clock)}
        if mode != "no-fix":
            fix["latitude"], fix["longitude"] = f["latitude"], f["longitude"]
            for key in ("speed", "course", "satellitesUsed"):
                if f.get(key) is not None:
                    fix[key] = f[key]
            if mode == "3d" and f.get("altitude") is not None:
                fix["altitude"] = f["altitude"]
            if f.get("hdop") is not None:
                fix["horizontalAccuracy"] = round(f["hdop"] * UERE, 1)
            if mode == "3d" and f.get("vdop") is not None:
                fix["verticalAccuracy"] = round(f["vdop"] * UERE, 1)
        return fix


def timestamp(date, clock):
    day, month, year = date
    hours, minutes, seconds = int(clock[0:2]), int(clock[2:4]), float(clock[4:] or 0)
    whole = int(seconds)
    millis = int(round((seconds - whole) * 1000))
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (year, month, day, hours, minutes, whole, millis)


class Assembler:
    """Sentences in, one fix per epoch out."""

    def __init__(self):
        self.epoch = None
        self.last_type = None
        self.ender = None
        self.date = None  # (day, month, year), from RMC or ZDA

    def feed(self, fields):
        kind = fields[0][2:] if len(fields[0]) >= 5 else fields[0]
        clock = None
        update = {}
        try:
            if kind == "GGA" and len(fields) >= 10:
                clock = fields[1]
                update = {"latitude": degrees(fields[2], fields[3]), "longitude": degrees(fields[4], fields[5]),
                          "quality": int(fields[6] or 0), "satellitesUsed": int(fields[7]) if fields[7] else None,
                          "hdop": number(fields[8]), "altitude": number(fields[9])}
            elif kind == "RMC" and len(fields) >= 10:
                clock = fields[1]
                speed, course = number(fields[7]), number(fields[8])
                update = {"status": fields[2], "latitude": degrees(fields[3], fields[4]),
                          "longitude": degrees(fields[5], fields[6]),
                          "speed": round(speed * KNOT, 3) if speed is not None else None,
                          "course": course if course is not None and 0 <= course <= 360 else None}
                if len(fields[9]) == 6:
                    update["date"] = (int(fields[9][0:2]), int(fields[9][2:4]), 2000 + int(fields[9][4:6]))
                    self.date = update["date"]
            elif kind == "ZDA" and len(fields) >= 5 and fields[2] and fields[3] and fields[4]:
                self.date = (int(fields[2]), int(fields[3]), int(fields[4]))
                return []
            elif kind == "GSA" and len(fields) >= 18:
                update = {"gsa_mode": int(fields[2] or 1), "hdop": number(fields[16]), "vdop": number(fields[17])}
            else:
                return []
        except ValueError:
            return []  # a field that does not parse: the sentence says nothing usable
        if clock is not None and not clock[:6].isdigit():
            return []
        fixes = []
        if clock is not None and (self.epoch is None or clock != self.epoch.clock):
            if self.epoch is not None:
                if self.ender is None:
                    self.ender = self.last_type
                if not self.epoch.emitted:
                    fixes.append(self.finish())
            self.epoch = Epoch(clock)
        if self.epoch is None:
            return fixes  # a GSA before any timed sentence
        self.epoch.fields.update({key: value for key, value in update.items() if value is not None})
        self.last_type = kind
        if kind == self.ender:
            fixes.append(self.finish())
        return [fix for fix in fixes if fix is not None]

    def finish(self):
        self.epoch.emitted = True
        date = self.date or time.gmtime()[:3][::-1]
        return self.epoch.fix(date)


# --- The receiver ---------------------------------------------------------------------

class Receiver:
    def __init__(self, device, baud):
        self.device, self.baud = device, baud
        self.streams = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = None
        self.descriptor = self.open()

    def open(self):
        try:
            descriptor = os.open(self.device, os.O_RDONLY | os.O_NOCTTY)
        except FileNotFoundError:
            raise PluginError("deviceNotFound", "%s does not exist" % self.device,
                              "plug the receiver in, or set device in [gps] (ls /dev/serial/by-id)")
        except PermissionError:
            raise PluginError("permissionDenied", "%s: permission denied" % self.device,
                              "add the service user to the tty's group (dialout)")
        except OSError as error:
            raise PluginError("unavailable", "%s: %s" % (self.device, error.strerror))
        if os.isatty(descriptor):
            tty.setraw(descriptor)
            attributes = termios.tcgetattr(descriptor)
            attributes[4] = attributes[5] = SPEEDS[self.baud]
            termios.tcsetattr(descriptor, termios.TCSANOW, attributes)
        return descriptor

    def watch(self, stream):
        with self.lock:
            self.streams.add(stream)
            if self.thread is None:
                self.thread = threading.Thread(target=self.read, daemon=True)
                self.thread.start()

    def unwatch(self, stream):
        with self.lock:
            self.streams.discard(stream)

    def publish(self, method, params):
        with self.lock:
            streams = list(self.streams)
        for stream in streams:
            send({"jsonrpc": "2.0", "method": method, "params": dict(params, stream=stream)})

    def read(self):
        assembler, pending, dropped = Assembler(), b"", 0
        while not self.stopping.is_set():
            try:
                chunk = os.read(self.descriptor, 4096) if self.descriptor is not None else b""
            except OSError:
                chunk = b""
            if not chunk:
                self.lost("%s went away" % self.device)
                assembler, pending = Assembler(), b""
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > 4096:
                pending = b""  # no sentence is this long: noise on the line
            for raw in lines:
                fields = checked(raw.decode("ascii", "replace"))
                if fields is None:
                    dropped += 1
                    if dropped in (1, 100, 10000):
                        log("dropped %d sentences with a wrong checksum or no checksum" % dropped)
                    continue
                for fix in assembler.feed(fields):
                    self.publish("gps.fix", {"fix": fix})

    def lost(self, reason):
        """Says so once, then tries the device again every second."""
        if self.release():
            log(reason)
            self.publish("gps.lost", {"reason": reason + "; reopening it every second"})
        while not self.stopping.wait(1.0):
            try:
                self.descriptor = self.open()
                log("%s is back" % self.device)
                return
            except PluginError:
                continue

    def close(self):
        self.stopping.set()
        self.release()

    def release(self):
        """Closes the tty if it is open; whether it was."""
        if self.descriptor is None:
            return False
        try:
            os.close(self.descriptor)
        except OSError:
            pass
        self.descriptor = None
        return True


# --- The protocol ---------------------------------------------------------------------

def main():
    receiver, watches = None, {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            log("the host sent a line that is not JSON")
            continue
        method, ident, params = request.get("method"), request.get("id"), request.get("params") or {}
        try:
            if method == "initialize":
                result = {"name": NAME, "version": VERSION, "protocol": PROTOCOL, "capabilities": ["gps"]}
            elif method == "open":
                if params.get("capability") != "gps":
                    raise PluginError("unsupported", "serves gps only")
                settings = params.get("parameters") or {}
                baud = settings.get("baud", 9600)
                if baud not in SPEEDS:
                    raise PluginError("invalidArgument", "baud %s is not one of %s" % (baud, sorted(SPEEDS)))
                if receiver is not None:
                    receiver.close()
                receiver = Receiver(settings["device"], baud)
                result = {"device": "nmea " + settings["device"]}
            elif method == "gps.watch":
                if receiver is None:
                    raise PluginError("notConfigured", "gps.watch before open")
                watches[ident] = ident
                receiver.watch(ident)
                result = {"stream": ident}
            elif method == "$/cancel":
                if receiver is not None and params.get("id") in watches:
                    receiver.unwatch(watches.pop(params["id"]))
                continue
            elif method in ("close", "shutdown"):
                if receiver is not None:
                    receiver.close()
                    receiver = None
                result = None
            elif method == "exit":
                break
            elif ident is None:
                continue  # a notification this plugin does not know
            else:
                send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "method not found: %s" % method}})
                continue
            if ident is not None:
                send({"jsonrpc": "2.0", "id": ident, "result": result})
        except PluginError as error:
            data = {"kind": error.kind, "detail": error.detail}
            if error.advice:
                data["advice"] = error.advice
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32000, "message": error.detail, "data": data}})
    if receiver is not None:
        receiver.close()


if __name__ == "__main__":
    main()
