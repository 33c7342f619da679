#!/usr/bin/env python3
"""Writes the NMEA 0183 logs that the gpsd tests replay through gpsfake.

Each log is one receiver's output, one epoch per second (GGA, GSA, RMC), with correct
checksums. The tests compare what the plugin reports with the values below, so the
values are simple on purpose. Run from this directory: ./make-logs.py
"""

DATE = "150326"  # 2026-03-15, RMC's ddmmyy


def sentence(body):
    checksum = 0
    for char in body:
        checksum ^= ord(char)
    return "$%s*%02X" % (body, checksum)


def degrees_minutes(value, is_latitude):
    magnitude = abs(value)
    whole = int(magnitude)
    minutes = (magnitude - whole) * 60
    if is_latitude:
        return "%02d%07.4f" % (whole, minutes), "N" if value >= 0 else "S"
    return "%03d%07.4f" % (whole, minutes), "E" if value >= 0 else "W"


def fix_epoch(second, lat, lon, alt, hdop, mode, knots, course):
    """One epoch with a fix; alt None makes GGA carry no altitude (a 2D receiver)."""
    time = "1200%02d.00" % second
    la, ns = degrees_minutes(lat, True)
    lo, ew = degrees_minutes(lon, False)
    altitude = "%.1f,M,39.5,M" % alt if alt is not None else ",,,"
    return [
        sentence("GPGGA,%s,%s,%s,%s,%s,1,08,%.1f,%s,," % (time, la, ns, lo, ew, hdop, altitude)),
        sentence("GPGSA,A,%d,01,03,06,11,14,17,19,22,,,,,%.1f,%.1f,%.1f" % (mode, hdop * 1.6, hdop, hdop * 1.4)),
        sentence("GPRMC,%s,A,%s,%s,%s,%s,%.2f,%.1f,%s,,,A" % (time, la, ns, lo, ew, knots, course, DATE)),
    ]


def fix_2d_epoch(second, lat, lon, hdop):
    """ZDA (date and time), GGA without altitude, GSA mode 2. No RMC: gpsd 3.22 takes an
    RMC with status A as a 3D fix whatever GSA says."""
    gga, gsa, _ = fix_epoch(second, lat, lon, None, hdop, 2, 0.0, 0.0)
    return [sentence("GPZDA,1200%02d.00,15,03,2026,00,00" % second), gga, gsa]


def no_fix_epoch(second):
    time = "1200%02d.00" % second
    return [
        sentence("GPGGA,%s,,,,,0,00,99.9,,,,,," % time),
        sentence("GPGSA,A,1,,,,,,,,,,,,,99.9,99.9,99.9"),
        sentence("GPRMC,%s,V,,,,,,,%s,,,N" % (time, DATE)),
    ]


def write(name, epochs):
    with open(name, "w", newline="") as log:
        log.write("# %s: written by make-logs.py for the gpsd plugin tests\r\n" % name)
        for epoch in epochs:
            for line in epoch:
                log.write(line + "\r\n")


# Walking north-east at 5 m/s (9.72 kn), climbing 0.5 m a second, HDOP 0.9.
write("moving-3d.nmea", [
    fix_epoch(s, 52.52 + s * 0.0001, 13.405 + s * 0.0001, 34.5 + s * 0.5, 0.9, 3, 9.72, 45.0)
    for s in range(10)
])

# A receiver with a 2D fix only (too few satellites for altitude), standing still.
write("fix-2d.nmea", [fix_2d_epoch(s, -33.8568, 151.2153, 2.0) for s in range(10)])

# A receiver indoors: time from its clock, no position.
write("no-fix.nmea", [no_fix_epoch(s) for s in range(10)])

# Cold start: six seconds without a fix, then a 3D fix.
write("late-fix.nmea",
      [no_fix_epoch(s) for s in range(6)]
      + [fix_epoch(s, 48.1173, 11.5167, 545.4, 1.2, 3, 0.0, 0.0) for s in range(6, 12)])
