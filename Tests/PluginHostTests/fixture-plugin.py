#!/usr/bin/env python3
"""A plugin process for the plugin host's tests: it speaks the plugin protocol's handshake
(docs/plugin-protocol.md) well, or fails in the way its first argument names."""
import json
import os
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "good"
manifest = json.load(open(os.environ["FIXTURE_MANIFEST"]))


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


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
    elif method == "shutdown":
        send({"jsonrpc": "2.0", "id": ident, "result": None})
    elif method == "exit":
        if mode != "linger":
            sys.exit(0)
    elif ident is not None:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "method not found: %s" % method}})
