"""What every command of the command line shares: the exit status of user errors, the context, JSON output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError

    from ragstep.context import Context

EXIT_USER_ERROR = 2


def validation_message(exc: ValidationError) -> str:
    """One line from a pydantic error: ``field: what is wrong`` for the first problem."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def context_of(args: argparse.Namespace) -> Context:
    """The request context of one command: the default tenant's, on the data dir ``--data-dir`` names."""
    from ragstep.context import Clients
    from ragstep.settings import Settings

    data_dir = getattr(args, "data_dir", None)
    settings = Settings(data_dir=Path(data_dir)) if data_dir else Settings()
    return Clients(settings).context()


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
