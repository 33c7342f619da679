#!/usr/bin/env python3
"""A peer that speaks like gpsd for one line, then misbehaves.

  hostile-gpsd.py PORT garbage-lines   lines that are not JSON, forever
  hostile-gpsd.py PORT endless-line    bytes with no newline, forever

Each connection gets the same treatment, so reconnecting does not help the client.
"""
import socket
import sys
import threading
import time

port, behaviour = int(sys.argv[1]), sys.argv[2]
VERSION = b'{"class":"VERSION","release":"3.22","rev":"3.22","proto_major":3,"proto_minor":14}\r\n'


def serve(connection):
    try:
        connection.sendall(VERSION)
        while True:
            if behaviour == "garbage-lines":
                connection.sendall(b"\x00\xff not json at all {{{ \r\n" + b'{"class":"TPV","mode":\r\n')
            else:
                connection.sendall(b"x" * 4096)
            time.sleep(0.05)
    except OSError:
        pass
    finally:
        connection.close()


listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(8)
while True:
    client, _ = listener.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
