"""Inside a sandboxed child's network namespace: a loopback TCP port that leads to the host's egress proxy.

Run by bubblewrap as `python -I relay.py --port P --socket PATH -- PROGRAM ARG...`. It listens
on 127.0.0.1:P (the child's own loopback, which HTTP_PROXY/HTTPS_PROXY name), forks a relay
that copies each connection to the proxy's Unix socket bound into the sandbox, and execs the
server in its own place. The relay needs no bounds of its own (the proxy has them) and dies
with the sandbox: when the server exits, bubblewrap's PID namespace ends and takes it along.
Standard library only: it runs from a read-only bind, without Toolgate's tree.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading

MAX_CONNECTIONS = 64


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(64 * 1024):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _serve(listener: socket.socket, path: str) -> None:
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    while True:
        client, _ = listener.accept()
        if not slots.acquire(blocking=False):
            client.close()
            continue
        threading.Thread(target=_carry, args=(client, path, slots), daemon=True).start()


def _carry(client: socket.socket, path: str, slots: threading.BoundedSemaphore) -> None:
    try:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            return
        back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
        back.start()
        _copy(client, upstream)
        back.join()
        client.close()
        upstream.close()
    finally:
        slots.release()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="relay")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    program = options.program[1:] if options.program[:1] == ["--"] else options.program
    if not program:
        sys.exit("relay: no program")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", options.port))
    listener.listen(MAX_CONNECTIONS)  # listening before the server starts: its first request finds the port
    if os.fork() == 0:
        # The relay holds none of the server's stdio: the host reads end of file when the server exits.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            _serve(listener, options.socket)
        finally:
            os._exit(0)
    listener.close()
    try:
        os.execvp(program[0], program)  # noqa: S606 - exec the argv as given, never a shell
    except OSError as exc:
        sys.exit(f"relay: cannot start {program[0]!r}: {exc.strerror}")


if __name__ == "__main__":
    main(sys.argv[1:])
