#!/usr/bin/env python3
"""A client of FieldHAL's hardware API in plain Python (standard library only).

The daemon (`fieldhal run`) serves HTTP/1.1 and JSON on a Unix socket; this module dials
it with http.client. Use it as a module:

    from fieldhal_api import FieldHAL
    kit = FieldHAL("/run/fieldhal/api.sock")
    print(kit.status()["caller"]["scopes"])
    print(kit.location(timeout_ms=3000)["fix"])
    for event in kit.events(types=["fix"]):
        print(event.type, event.data)

or from a shell:

    python3 fieldhal_api.py --socket /run/fieldhal/api.sock status
    python3 fieldhal_api.py location --timeout-ms 3000
    python3 fieldhal_api.py events --types fix --count 5

Each command prints JSON (one line per event, flushed); an error prints the daemon's typed
error on stderr and exits 69 (unavailable), 77 (refused), 64 (bad request) or 70.
The contract is api/openapi.yaml.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import urllib.parse
from dataclasses import dataclass
from typing import Any, Iterator

DEFAULT_SOCKETS = ("/run/fieldhal/api.sock",)


class FieldHALError(Exception):
    """The daemon's typed error (the `error` of an ErrorBody), or a transport failure."""

    def __init__(self, kind: str, subject: str, detail: str, advice: str | None = None, status: int = 0):
        self.kind, self.subject, self.detail, self.advice, self.status = kind, subject, detail, advice, status
        text = f"{subject}: {detail}" if subject else detail
        super().__init__(text + (f" — {advice}" if advice else ""))


@dataclass
class Event:
    type: str
    data: Any


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("fieldhal", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError as error:
            sock.close()
            raise FieldHALError("unavailable", self._path, f"cannot connect: {error.strerror or error}",
                                "is `fieldhal run` running? `systemctl status fieldhal`; "
                                "or pass the daemon's [api] socket") from None
        self.sock = sock


class FieldHAL:
    """The daemon at `socket_path` (default: $FIELDHAL_API_SOCKET, else /run/fieldhal/api.sock)."""

    def __init__(self, socket_path: str | None = None, timeout: float = 70.0):
        self.socket_path = socket_path or os.environ.get("FIELDHAL_API_SOCKET") or DEFAULT_SOCKETS[0]
        self.timeout = timeout

    def _request(self, path: str, query: dict[str, Any] | None = None, stream: bool = False, body: dict | None = None,
                 method: str | None = None):
        query = {k: v for k, v in (query or {}).items() if v is not None}
        # A list is a repeated parameter (`device=left&device=right`).
        target = "/v1/" + path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
        connection = _UnixConnection(self.socket_path, None if stream else self.timeout)
        headers = {"Accept": "text/event-stream" if stream else "application/json"}
        if body is None:
            connection.request(method or "GET", target, headers=headers)
        else:
            headers["Content-Type"] = "application/json"
            connection.request(method or "POST", target, body=json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            body = response.read()
            connection.close()
            try:
                problem = json.loads(body)["error"]
            except (ValueError, KeyError, TypeError):
                raise FieldHALError("protocolError", target, f"HTTP {response.status} with a body that is not an ErrorBody",
                                    status=response.status) from None
            raise FieldHALError(problem.get("kind", "?"), problem.get("subject", ""), problem.get("detail", ""),
                                problem.get("advice"), problem.get("status", response.status))
        return connection, response

    def _json(self, path: str, query: dict[str, Any] | None = None, body: dict | None = None, method: str | None = None) -> Any:
        connection, response = self._request(path, query, body=body, method=method)
        try:
            return json.loads(response.read())
        finally:
            connection.close()

    def status(self) -> dict:
        return self._json("status")

    def capabilities(self) -> dict:
        return self._json("capabilities")

    def location(self, timeout_ms: int | None = None, max_age_ms: int | None = None,
                 accuracy_m: float | None = None) -> dict:
        return self._json("location", {"timeout_ms": timeout_ms, "max_age_ms": max_age_ms, "accuracy_m": accuracy_m})

    # The NFC chip, shared in turns with everyone else who uses it: each call ends within
    # timeout_ms, waiting for the chip included (a "busy" error names what holds it).

    def read_tag(self, timeout_ms: int | None = None) -> dict:
        return self._json("nfc/read", body=_without_none({"timeoutMs": timeout_ms}))

    def write_tag(self, records: list[dict], timeout_ms: int | None = None) -> dict:
        """records: [{"text": "…", "language": "en"}] or [{"uri": "https://…"}], up to 8."""
        return self._json("nfc/write", body=_without_none({"records": records, "timeoutMs": timeout_ms}))

    def emulate_tag(self, records: list[dict], timeout_ms: int | None = None) -> dict:
        """Presents the records as a tag until a reader reads them: {"wasRead": …}."""
        return self._json("nfc/emulate", body=_without_none({"records": records, "timeoutMs": timeout_ms}))

    def photo(self, width: int | None = None, height: int | None = None, quality: int | None = None) -> bytes:
        """A still as JPEG bytes (during a recording: its next frame, at its size)."""
        connection, response = self._request("camera/photo", {"width": width, "height": height, "quality": quality})
        try:
            return response.read()
        finally:
            connection.close()

    def lock(self) -> dict:
        return self._json("lock")

    def evidence(self) -> dict:
        return self._json("evidence")

    def capture_evidence(self, kind: str, text: str | None = None, seconds: int | None = None,
                         incident_id: str | None = None) -> dict:
        """PHOTO, AUDIO, VIDEO, TEXT (with text) or NEARBY, captured with the daemon's devices
        into its sealed queue: the item as `evidence` lists it."""
        return self._json("evidence", body=_without_none({"kind": kind, "text": text, "seconds": seconds,
                                                          "incidentId": incident_id}))

    def flush_evidence(self) -> dict:
        """Uploads what the user queued now: {"uploaded", "remaining", "errors"}."""
        return self._json("evidence/flush", body={})

    # The flows. A PIN goes only over the daemon's socket: never put one on a command line.

    def unlock(self, pin: str) -> dict:
        """{"outcome": "unlocked" | "rejected" | "paused", "message", "retryAfterSeconds"}."""
        return self._json("lock/unlock", body={"pin": pin})

    def session(self) -> dict:
        return self._json("session")

    def sign_in(self, customer_ref: str, pin: str) -> dict:
        return self._json("session", body={"customerRef": customer_ref, "pin": pin})

    def sign_out(self) -> dict:
        return self._json("session", method="DELETE")

    def acknowledge(self, alert_id: str | None = None, nfc: bool = False, timeout_ms: int | None = None) -> dict:
        """In the app (alert_id), or by reading the duressed kit's tag with the kit's NFC chip."""
        return self._json("alerts/acknowledge", body=_without_none(
            {"method": "NFC" if nfc else "INAPP", "alertId": alert_id, "timeoutMs": timeout_ms}))

    def play_haptics(self, pattern: str) -> dict:
        """A named pattern (success, warning, error, light, medium, heavy), played to its end."""
        return self._json("haptics/play", body={"pattern": pattern})

    def play_sound(self, sound: str = "soft-alert") -> dict:
        return self._json("speaker/play", body={"sound": sound})

    def events(self, types: list[str] | None = None, devices: list[str] | None = None) -> Iterator[Event]:
        """Server-Sent Events until the daemon ends the stream (it stops). `devices`: the
        receivers and readers to follow by name (default: each one's default device); each
        fix and tag event names its own in `device`."""
        connection, response = self._request("events", {"types": ",".join(types) if types else None,
                                                        "device": devices or None}, stream=True)
        try:
            kind, data = None, []
            for raw in response:
                line = raw.decode("utf-8").rstrip("\r\n")
                if not line:
                    if kind is not None:
                        yield Event(kind, json.loads("\n".join(data)))
                    kind, data = None, []
                elif line.startswith(":"):
                    continue
                elif line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
        finally:
            connection.close()


def _without_none(values: dict) -> dict:
    return {key: value for key, value in values.items() if value is not None}


EXIT = {"forbidden": 77, "invalidArgument": 64, "notFound": 64, "noFix": 69, "unavailable": 69,
        "notConfigured": 78, "timeout": 75, "busy": 75, "invalidCredentials": 77, "rateLimited": 75, "network": 75,
        "configuration": 78, "suspended": 69, "failed": 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="FieldHAL's hardware API from the shell (JSON out).")
    parser.add_argument("--socket", help="the daemon's API socket (default $FIELDHAL_API_SOCKET or /run/fieldhal/api.sock)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="the daemon and who it takes you to be")
    commands.add_parser("capabilities", help="how each capability loaded")
    location = commands.add_parser("location", help="one fix")
    location.add_argument("--timeout-ms", type=int)
    location.add_argument("--max-age-ms", type=int)
    location.add_argument("--accuracy-m", type=float)
    read = commands.add_parser("read-tag", help="wait for an NFC tag and read it")
    read.add_argument("--timeout-ms", type=int)
    for name, text in [("write-tag", "write a Text or URI record to the next tag"),
                       ("emulate-tag", "present a Text or URI record as a tag until it is read")]:
        command = commands.add_parser(name, help=text)
        content = command.add_mutually_exclusive_group(required=True)
        content.add_argument("--text")
        content.add_argument("--uri")
        command.add_argument("--language")
        command.add_argument("--timeout-ms", type=int)
    photo = commands.add_parser("photo", help="a still, as JPEG to --output")
    photo.add_argument("--output", required=True)
    photo.add_argument("--width", type=int)
    photo.add_argument("--height", type=int)
    photo.add_argument("--quality", type=int)
    commands.add_parser("lock", help="the kit's lock")
    commands.add_parser("evidence", help="the evidence waiting to upload")
    commands.add_parser("haptics", help="play a vibration pattern").add_argument("pattern")
    commands.add_parser("sound", help="play a sound").add_argument("sound", nargs="?", default="soft-alert")
    commands.add_parser("session", help="who is signed in to Transrify")
    acknowledge = commands.add_parser("ack", help="acknowledge a nearby alert (in the app, or --nfc by its tag)")
    acknowledge.add_argument("alert_id", nargs="?")
    acknowledge.add_argument("--nfc", action="store_true")
    acknowledge.add_argument("--timeout-ms", type=int)
    events = commands.add_parser("events", help="fixes, capability changes, alerts, the lock's state and tags found and lost, one JSON line each")
    events.add_argument("--types", help="comma-separated: fix, capability, alert, lock, tag")
    events.add_argument("--count", type=int, help="stop after this many events")
    events.add_argument("--device", action="append", help="a receiver or reader to follow, by name; repeat it for several")
    args = parser.parse_args(argv)
    kit = FieldHAL(args.socket)
    try:
        if args.command == "status":
            print(json.dumps(kit.status(), sort_keys=True))
        elif args.command == "capabilities":
            print(json.dumps(kit.capabilities(), sort_keys=True))
        elif args.command == "location":
            print(json.dumps(kit.location(args.timeout_ms, args.max_age_ms, args.accuracy_m), sort_keys=True))
        elif args.command == "photo":
            jpeg = kit.photo(args.width, args.height, args.quality)
            with open(args.output, "wb") as file:
                file.write(jpeg)
            print(json.dumps({"output": args.output, "bytes": len(jpeg)}, sort_keys=True))
        elif args.command in ("lock", "evidence", "session"):
            print(json.dumps(getattr(kit, args.command)(), sort_keys=True))
        elif args.command == "ack":
            print(json.dumps(kit.acknowledge(args.alert_id, args.nfc, args.timeout_ms), sort_keys=True))
        elif args.command == "haptics":
            print(json.dumps(kit.play_haptics(args.pattern), sort_keys=True))
        elif args.command == "sound":
            print(json.dumps(kit.play_sound(args.sound), sort_keys=True))
        elif args.command == "read-tag":
            print(json.dumps(kit.read_tag(args.timeout_ms), sort_keys=True))
        elif args.command in ("write-tag", "emulate-tag"):
            record = _without_none({"text": args.text, "uri": args.uri, "language": args.language})
            call = kit.write_tag if args.command == "write-tag" else kit.emulate_tag
            print(json.dumps(call([record], args.timeout_ms), sort_keys=True))
        else:
            seen = 0
            for event in kit.events(args.types.split(",") if args.types else None, args.device):
                print(json.dumps({"type": event.type, "data": event.data}, sort_keys=True), flush=True)
                seen += 1
                if args.count and seen >= args.count:
                    break
    except FieldHALError as error:
        print(f"fieldhal-api: {error}", file=sys.stderr)
        return EXIT.get(error.kind, 70)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
