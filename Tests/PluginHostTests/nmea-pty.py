#!/usr/bin/env python3
"""A receiver's serial port for the nmea-serial plugin's tests: a pty whose other side
this script writes an NMEA log into, on command.

Prints the tty's path, then on stdin: `feed` writes the log (a half sentence and one with
a wrong checksum first, as a noisy line does; 50 ms between epochs) and prints `fed`;
`unplug` closes the pty, prints `unplugged` and exits."""
import os
import sys
import time

master, slave = os.openpty()
print(os.ttyname(slave), flush=True)
sentences = [line.rstrip("\r\n") for line in open(sys.argv[1]) if line.startswith("$")]
for command in sys.stdin:
    command = command.strip()
    if command == "feed":
        os.write(master, b"A,120000.00,5231.2\r\n")
        os.write(master, b"$GPGGA,115959.00,1111.0000,N,01111.0000,E,1,08,0.9,34.5,M,39.5,M,,*00\r\n")
        for index, sentence in enumerate(sentences):
            os.write(master, (sentence + "\r\n").encode())
            if index % 3 == 2:
                time.sleep(0.05)
        print("fed", flush=True)
    elif command == "unplug":
        os.close(master)
        os.close(slave)
        print("unplugged", flush=True)
        break
