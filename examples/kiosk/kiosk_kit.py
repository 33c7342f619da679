"""The example kiosk's parts, for ./run and for the browser's tests (lab/kiosk-browser).

A daemon on the fake kit with its web door, a token for the page's origin, and the page
served from that origin. Standard library only.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCOPES = "status,location,nfc.read,haptics,speaker,camera"


class Daemon:
    """`fieldhal run` on the fake kit with `[web] listen = 127.0.0.1:<door_port>`."""

    def __init__(self, fieldhal: str, door_port: int, state: str | None = None):
        self.fieldhal, self.door_port = fieldhal, door_port
        self.state = state or tempfile.mkdtemp(prefix="fieldhal-kiosk-")
        self.config = os.path.join(self.state, "kit.toml")
        with open(os.path.join(HERE, "kit.toml")) as kit, open(self.config, "w") as out:
            out.write(kit.read() + f'\n[web]\nlisten = "127.0.0.1:{door_port}"\n')
        self.process: subprocess.Popen | None = None
        self.log = open(os.path.join(self.state, "daemon.log"), "a")

    @property
    def door(self) -> str:
        return f"http://127.0.0.1:{self.door_port}"

    def start(self, timeout: float = 60) -> None:
        self.process = subprocess.Popen([self.fieldhal, "run", "--config", self.config, "--state-dir", self.state],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.process.returncode}; see {self.log.name}")
            try:
                urllib.request.urlopen(urllib.request.Request(self.door + "/fieldhal.js"), timeout=2).close()
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"the web door did not answer on {self.door} within {timeout:.0f} s; see {self.log.name}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def fieldhal_command(self, *arguments: str) -> dict | list:
        output = subprocess.run([self.fieldhal, *arguments, "--config", self.config, "--state-dir", self.state, "--json"],
                                check=True, capture_output=True, text=True).stdout
        return json.loads(output)

    def issue_token(self, origin: str, scopes: str = SCOPES) -> dict:
        return self.fieldhal_command("web", "token", "add", "--origin", origin, "--allow", scopes)

    def revoke_token(self, token_id: str) -> dict:
        return self.fieldhal_command("web", "token", "revoke", token_id)


class Page:
    """The kiosk page on `http://localhost:<port>`, its config.js naming the door and token."""

    def __init__(self, port: int, door: str, token: str):
        self.port = port
        self.directory = tempfile.mkdtemp(prefix="fieldhal-kiosk-page-")
        for name in ("index.html", "kiosk.js"):
            shutil.copy(os.path.join(HERE, name), self.directory)
        with open(os.path.join(self.directory, "config.js"), "w") as config:
            config.write(f"export const door = {json.dumps(door)};\nexport const token = {json.dumps(token)};\n")
        handler = functools.partial(_QuietHandler, directory=self.directory)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://localhost:{self.port}/"

    def stop(self) -> None:
        self.server.shutdown()
        shutil.rmtree(self.directory, ignore_errors=True)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass
