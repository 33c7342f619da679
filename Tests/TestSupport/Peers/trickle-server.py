#!/usr/bin/env python3
"""A hostile HTTP server: answers every request with a head declaring a body of 1000 bytes,
then sends that body one byte every INTERVAL seconds.

    trickle-server.py [--interval S]

Prints "listening PORT" once it accepts connections on 127.0.0.1, then, for each
connection, "closed after N s" when the client closes it (or the server could not write).
"""
import argparse
import socket
import sys
import threading
import time


def serve(connection, interval):
    started = time.monotonic()
    try:
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
        while True:
            connection.sendall(b" ")
            # A closed peer shows as readable with nothing to read.
            connection.settimeout(interval)
            try:
                if connection.recv(1) == b"":
                    break
            except socket.timeout:
                pass
    except OSError:
        pass
    print(f"closed after {time.monotonic() - started:.1f} s", flush=True)
    connection.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=5)
    args = parser.parse_args()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(f"listening {listener.getsockname()[1]}", flush=True)
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=serve, args=(connection, args.interval), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
