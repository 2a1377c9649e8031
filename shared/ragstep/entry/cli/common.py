"""What every command of the command line shares: the exit status of user errors, the context, JSON output."""

from __future__ import annotations

import argparse
import gc
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

    from ragstep.context import Context

EXIT_USER_ERROR = 2


def validation_message(exc: ValidationError) -> str:
    """One line from a pydantic error: ``field: what is wrong`` for the first problem (an unknown key: what its
    object accepts)."""
    from ragstep.models.unknown_fields import first_problem

    return first_problem(exc)


def context_of(args: argparse.Namespace) -> Context:
    """The request context of one command: the default tenant's, on the data dir ``--data-dir`` names."""
    from ragstep.context import Clients
    from ragstep.settings import Settings

    data_dir = getattr(args, "data_dir", None)
    settings = Settings(data_dir=Path(data_dir)) if data_dir else Settings()
    return Clients(settings).context()


def require_data(args: argparse.Namespace, store: str = "catalog") -> None:
    """For a command that only reads (search, chat, ``kb list``, ``sessions list``, ``usage`` ...): stop with a line
    naming the data dir when it holds no ragstep data -- a mistyped ``--data-dir`` -- before anything would create
    it there. ``store``: the store the command reads (its backend may keep it outside the data dir)."""
    from ragstep.data_dir import existing_data_dir
    from ragstep.entry.cli.plain import embedded_data_dir

    path = embedded_data_dir(getattr(args, "data_dir", None), os.environ, store)
    if path is not None:
        existing_data_dir(path)


@contextmanager
def collector_paused(*, until_exit: bool = False) -> Iterator[None]:
    """Run a one-request command without the cyclic garbage collector; switched back on after it (if it was on),
    unless ``until_exit``: the command is the whole process (``main`` called for the process's own command line).

    Most of what ``ragstep search`` allocates is what it imports and builds once (pydantic, the models, numpy):
    tens of thousands of tracked objects that live until the process ends. The collector's passes over the young
    ones freed almost nothing, and the full pass the interpreter makes at exit when the collector is on finds what
    exit frees anyway: CPU spent for nothing, at no measurable cost in peak memory without them.
    Not for commands that run long (ingest, serve, bench): there the collector must keep up.

    ``until_exit`` also freezes what the command leaves (:func:`gc.freeze`): the interpreter collects once more at
    exit even with the collector off, and that pass over objects exit frees anyway was a visible share of a
    search's wall time (``ragstep bench cli``). Frozen objects are still freed by reference counting when the
    modules are torn down; only the search for cycles among them is skipped, which the end of the process makes
    moot.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if until_exit:
            gc.freeze()
        elif enabled:
            gc.enable()


def keep_logs_off_the_terminal(*loggers: str) -> None:
    """What ``loggers`` log goes nowhere (unless ``RAGSTEP_DEBUG=1``, or a handler is already set): without a
    handler Python prints a warning as a bare line on stderr, in the middle of the progress and the table, with no
    ``ragstep:`` to say whose it is. The command's own line says what failed (a PDF pypdf cannot read is its file's
    ``failed`` row; a provider's error, its fixed description); the details are for a server's log."""
    import logging
    import os

    if os.environ.get("RAGSTEP_DEBUG"):
        return
    for name in loggers:
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(logging.NullHandler())


def print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text}")
    return value


def add_profile_arguments(p: argparse.ArgumentParser) -> None:
    """``--profile``, ``--budget-ms`` and ``--cost-budget-usd`` (ragstep.models.profiles), for search and chat."""
    p.add_argument("--profile", metavar="NAME", help="quick, standard (the default), deep, or one of RAGSTEP_PROFILES")
    p.add_argument(
        "--budget-ms", type=positive_int, metavar="MS", help="latency budget: optional stages are given up to meet it"
    )
    p.add_argument(
        "--cost-budget-usd",
        type=positive_float,
        metavar="USD",
        help="cost budget (estimated USD): optional stages are given up to meet it; the receipt says if it was not",
    )


def profile_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields of :func:`add_profile_arguments` that were given."""
    fields = {
        "profile": getattr(args, "profile", None),
        "budget_ms": getattr(args, "budget_ms", None),
        "cost_budget_usd": getattr(args, "cost_budget_usd", None),
    }
    return {k: v for k, v in fields.items() if v is not None}
