#!/usr/bin/env python3
"""A hostile local user against the daemon's API socket, and a granted client beside it.

    api-flood.py flood SOCKET --uid UID --connections N --seconds S
    api-flood.py poll SOCKET --uid UID --requests N --interval-ms MS

flood: started as root, raises its own descriptor limit, becomes UID (no grant on the
daemon), and tries to hold N connections open for S seconds (or until SIGTERM), each sending the start of a
request head and then one header line a second: the slow-header attack. Closed
connections are opened again at once. Prints {"flooding": N} once it has opened N, and one
JSON line at the end: the most it held at
once, how many connections it opened and how many the daemon closed.

poll: becomes UID and asks GET /v1/status N times, one every MS milliseconds, each with a
5 s bound. Prints one JSON line: how many were answered 200 and each one's latency in ms.
"""
import argparse
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time


def become(uid):
    if os.getuid() == uid:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def flood(args):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 64
    if hard < want and os.getuid() == 0:
        hard = want
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    become(args.uid)
    selector = selectors.DefaultSelector()
    opened = closed = most = refused_at_connect = 0
    held = {}

    def connect():
        nonlocal opened, refused_at_connect
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(args.socket)
            s.send(b"GET /v1/status HTTP/1.1\r\nHost: kit\r\n")
        except (BlockingIOError, InterruptedError):
            pass  # the backlog is full: it counts as held until the daemon takes or drops it
        except OSError:
            refused_at_connect += 1
            s.close()
            return
        opened += 1
        held[s.fileno()] = s
        selector.register(s, selectors.EVENT_READ)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    # A test runner may start its children with SIGTERM blocked: the stop would never come.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    end = time.monotonic() + args.seconds
    next_drip = time.monotonic() + 1
    announced = False
    while time.monotonic() < end and not stop:
        while len(held) < args.connections and time.monotonic() < end and not stop:
            connect()
            if opened % 200 == 0:
                break  # let the reads below run between bursts
        most = max(most, len(held))
        if not announced and opened >= args.connections:
            announced = True
            print(json.dumps({"flooding": opened}), flush=True)
        for key, _ in selector.select(timeout=0.05):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                selector.unregister(s)
                held.pop(s.fileno(), None)
                s.close()
                closed += 1
        if time.monotonic() >= next_drip:
            next_drip += 1
            for s in list(held.values()):
                try:
                    s.send(b"X-Drip: a\r\n")
                except OSError:
                    pass
    print(json.dumps({"most_held": most, "opened": opened, "closed_by_daemon": closed,
                      "refused_at_connect": refused_at_connect}), flush=True)


def poll(args):
    become(args.uid)
    answered = 0
    latencies = []
    failures = []
    for _ in range(args.requests):
        started = time.monotonic()
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(args.socket)
            s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: kit\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            s.close()
            if data.startswith(b"HTTP/1.1 200"):
                answered += 1
                latencies.append(round((time.monotonic() - started) * 1000, 2))
            else:
                failures.append(data[:80].decode(errors="replace"))
        except OSError as error:
            failures.append(str(error))
        time.sleep(args.interval_ms / 1000)
    print(json.dumps({"requests": args.requests, "answered": answered, "latencies_ms": latencies,
                      "failures": failures[:5]}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("flood")
    f.add_argument("socket")
    f.add_argument("--uid", type=int, required=True)
    f.add_argument("--connections", type=int, default=2000)
    f.add_argument("--seconds", type=float, default=30)
    p = sub.add_parser("poll")
    p.add_argument("socket")
    p.add_argument("--uid", type=int, required=True)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--interval-ms", type=int, default=50)
    args = parser.parse_args()
    flood(args) if args.command == "flood" else poll(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
