#!/usr/bin/env python3
"""A TCP proxy on loopback that delays what crosses it, per direction, with jitter.

    latency-proxy.py --target 127.0.0.1:8787 [--port 0] [--up-ms 50-300] [--down-ms 50-300]
                     [--epoch-file FILE] [--seed N]

Prints "latency-proxy listening on 127.0.0.1:PORT" (flushed) once it accepts connections.
Every chunk read from one side is delivered to the other side after a delay drawn from the
direction's range (uniformly), never before an earlier chunk of the same direction: the
byte stream keeps its order, as TCP does, and a burst is not sped up by a shorter draw.

Paired runs: with --epoch-file, each connection's delays come from a generator seeded by
the file's current contents and the connection's first request line (what the client sends
first, up to the first newline). Two runs that make the same request in the same epoch see
the same delays, so a comparison of their times measures the kit, not the dice; a new
epoch (the harness writes the file) draws new delays.

Only for tests on this machine: it binds 127.0.0.1 and refuses any other target.
"""
import argparse
import asyncio
import hashlib
import random
import signal
import sys


def parse_range(text):
    low, _, high = text.partition("-")
    low = float(low)
    high = float(high) if high else low
    if low < 0 or high < low:
        raise argparse.ArgumentTypeError(f"{text}: want MIN-MAX milliseconds, MIN <= MAX")
    return (low / 1000.0, high / 1000.0)


class Direction:
    """One direction of one connection: chunks leave in order, each after its delay."""

    def __init__(self, writer, delays, rng):
        self.writer = writer
        self.delays = delays
        self.rng = rng
        self.queue = asyncio.Queue()
        self.last_release = 0.0

    def push(self, chunk):
        loop = asyncio.get_running_loop()
        release = max(loop.time() + self.rng.uniform(*self.delays), self.last_release)
        self.last_release = release
        self.queue.put_nowait((release, chunk))

    async def deliver(self):
        loop = asyncio.get_running_loop()
        try:
            while True:
                release, chunk = await self.queue.get()
                wait = release - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if chunk is None:
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                    return
                self.writer.write(chunk)
                await self.writer.drain()
        except (ConnectionError, OSError):
            return


async def pump(reader, direction, first_line=None):
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            if first_line is not None and not first_line.done():
                first_line.set_result(chunk.split(b"\n", 1)[0])
            direction.push(chunk)
    except (ConnectionError, OSError):
        pass
    if first_line is not None and not first_line.done():
        first_line.set_result(b"")
    direction.push(None)


class Proxy:
    def __init__(self, args):
        self.args = args
        self.connections = 0

    def generators(self, first_line):
        """One generator per direction, so that the delays one direction draws do not depend
        on how the two directions' chunks interleave in time."""
        if self.args.epoch_file:
            try:
                with open(self.args.epoch_file, "rb") as handle:
                    epoch = handle.read()
            except OSError:
                epoch = b""
            seed = epoch + b"\0" + first_line
        else:
            self.connections += 1
            seed = f"{self.args.seed}:{self.connections}".encode()
        return tuple(random.Random(int.from_bytes(hashlib.sha256(seed + tag).digest()[:8], "big")) for tag in (b"up", b"down"))

    async def handle(self, client_reader, client_writer):
        host, port = self.args.target
        try:
            server_reader, server_writer = await asyncio.open_connection(host, port)
        except OSError:
            client_writer.close()
            return
        # The client speaks first in HTTP and WebSocket: its first line seeds the delays.
        first_line = asyncio.get_running_loop().create_future()
        pending = []

        class Buffered:
            """Holds chunks until the generator exists (the first chunk makes it)."""
            def push(self, chunk):
                pending.append(chunk)

        up_holder = Buffered()
        client_task = asyncio.ensure_future(pump(client_reader, up_holder, first_line))
        line = await first_line
        up_rng, down_rng = self.generators(line)
        up = Direction(server_writer, self.args.up_ms, up_rng)
        down = Direction(client_writer, self.args.down_ms, down_rng)
        # Chunks read before the generator existed go first, in order.
        for chunk in pending:
            up.push(chunk)
        up_holder.push = up.push
        server_task = asyncio.ensure_future(pump(server_reader, down))
        await asyncio.gather(client_task, server_task, up.deliver(), down.deliver(), return_exceptions=True)
        for writer in (client_writer, server_writer):
            try:
                writer.close()
            except OSError:
                pass

    async def run(self):
        server = await asyncio.start_server(self.handle, "127.0.0.1", self.args.port)
        port = server.sockets[0].getsockname()[1]
        print(f"latency-proxy listening on 127.0.0.1:{port}", flush=True)
        stop = asyncio.get_running_loop().create_future()
        for signum in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(signum, lambda: stop.done() or stop.set_result(None))
        async with server:
            await stop


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to (loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any, printed)")
    parser.add_argument("--up-ms", type=parse_range, default=(0.05, 0.3), help="client→server delay range, ms (default 50-300)")
    parser.add_argument("--down-ms", type=parse_range, default=(0.05, 0.3), help="server→client delay range, ms (default 50-300)")
    parser.add_argument("--epoch-file", help="seed delays from this file's contents and each connection's first line")
    parser.add_argument("--seed", type=int, default=1, help="seed when there is no epoch file")
    args = parser.parse_args()
    host, _, port = args.target.rpartition(":")
    if host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("latency-proxy: only a loopback target is allowed")
    args.target = (host, int(port))
    asyncio.run(Proxy(args).run())


if __name__ == "__main__":
    main()
