"""``ragstep serve``: the HTTP API on a local port, with uvicorn (the ``serve`` extra)."""

from __future__ import annotations

import argparse
import socket

from ragstep.entry.cli.common import context_of, whole_number
from ragstep.errors import InputError

MAX_PORT = 65535


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1-65535 (0 would pick a random port nobody is told about)."""
    value = whole_number(text)
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port; use 1-{MAX_PORT}")
    return value


def check_listen(host: str, port: int) -> None:
    """Fail now, as a user error, when ``host:port`` cannot be listened on (a port in use, a host that is not this
    machine's); uvicorn would log the error and exit on its own."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise InputError(f"--host {host!r}: {exc.strerror}; use an address of this machine, e.g. 127.0.0.1") from None
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as sock:
            # As uvicorn binds: a port left in TIME_WAIT by a stopped server is free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port") from None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        raise InputError("`ragstep serve` needs uvicorn: pip install 'ragstep[serve]'") from None
    from ragstep.entry.http.app import create_app

    ctx = context_of(args)
    ctx.catalog  # noqa: B018 - open the data dir now so a bad --data-dir fails before the server starts
    check_listen(args.host, args.port)
    uvicorn.run(create_app(ctx.clients), host=args.host, port=args.port, log_level="info")
    return 0
