"""``ragstep serve``: the HTTP API on a local port, with uvicorn (the ``serve`` extra)."""

from __future__ import annotations

import argparse
import sys

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
    import socket  # here: the parser (port_number) is built at every start-up, sockets are for serving

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


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is this machine's loopback (127.0.0.0/8, ::1)."""
    import ipaddress
    import socket

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def access_rule(host: str, has_keys: bool, auth: str) -> str:
    """What the server will require, as the line to print at start-up; :class:`InputError` when serving ``host``
    without keys would let anyone who reaches it read and change every knowledge base."""
    if has_keys:
        return f"API keys required on {host}: send `Authorization: Bearer <key>` or `X-API-Key: <key>`"
    if auth == "required":
        raise InputError(
            "RAGSTEP_AUTH=required but no API key exists; make one first: ragstep keys create --scope search"
        )
    if not is_loopback(host):
        raise InputError(
            f"refusing to serve {host} without API keys: anyone who can reach it could read and change every "
            "knowledge base; make a key first (ragstep keys create --scope search) or serve on 127.0.0.1"
        )
    return (
        f"no API keys configured: serving the default tenant without authentication on {host} only; "
        "`ragstep keys create` makes the server require keys"
    )


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        raise InputError("`ragstep serve` needs uvicorn: pip install 'ragstep[serve]'") from None
    from ragstep.entry.cli.common import require_data
    from ragstep.entry.http.app import create_app
    from ragstep.errors import NotFoundError

    empty = ""
    try:  # asked before the catalog makes the folder: on a mistyped --data-dir the console would just be empty
        require_data(args)
    except NotFoundError as exc:
        empty = exc.message
    ctx = context_of(args)
    ctx.catalog  # noqa: B018 - open the data dir now so a bad --data-dir fails before the server starts
    check_listen(args.host, args.port)
    if empty:
        print(f"ragstep: serve: {empty}; serving it empty", file=sys.stderr)
    print(f"ragstep: {access_rule(args.host, ctx.clients.keys.has_keys(), ctx.settings.auth)}", file=sys.stderr)
    uvicorn.run(create_app(ctx.clients), host=args.host, port=args.port, log_level="info")
    return 0
