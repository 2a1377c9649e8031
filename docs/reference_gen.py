"""Writes the docs site's reference pages from the code, so they cannot drift from it:

* ``reference/settings.md``: every ``RAGSTEP_*`` setting (the fields of :class:`ragstep.settings.Settings` and the
  per-request chat settings), its type, its default and its description: the comment block written above it in
  ``settings.py`` (a field without one fails the docs test).
* ``reference/cli.md``: every command and action of ``ragstep`` with its help line and options (from the parser).
* ``reference/http.md``: every route of the HTTP API (from the app and its OpenAPI document) with its summary.
* ``reference/pipelines.md``: every declared pipeline and its steps.

Run ``python docs/reference_gen.py`` (``./dev docs`` does) after changing any of them; ``tests/test_docs.py`` fails
while a page is out of date.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "reference"
sys.path.insert(0, str(ROOT / "shared"))


def _comments_above(source: str, cls: str) -> dict[str, str]:
    """Each field of class ``cls`` in ``source`` -> the comment block nearest above it (blocks cover the fields
    that follow them until the next block or blank line)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    found: dict[str, str] = {}
    current = ""
    previous_end = node.lineno
    for item in node.body:
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            previous_end = getattr(item, "end_lineno", previous_end) or previous_end
            continue
        between = lines[previous_end : item.lineno - 1]
        block = [ln.strip()[1:].strip() for ln in between if ln.strip().startswith("#")]
        if block:
            current = " ".join(x for x in block if not x.startswith(":")).strip()
        elif any(not ln.strip() for ln in between):
            current = ""
        inline = lines[item.lineno - 1].split("  # ", 1)
        found[item.target.id] = (inline[1].strip() if len(inline) > 1 else "") or current
        previous_end = item.end_lineno or item.lineno
    return found


def _settings_rows(model: Any, prefix: str) -> list[tuple[str, str, str, str]]:
    import inspect

    described: dict[str, str] = {}
    for klass in model.__mro__:
        if not klass.__module__.startswith("ragstep."):
            continue
        source = Path(inspect.getsourcefile(klass) or "").read_text(encoding="utf-8")
        for name, text in _comments_above(source, klass.__name__).items():
            described.setdefault(name, text)
    rows = []
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = "—" if default is None else f"`{default!r}`" if not isinstance(default, str) else f"`{default}`"
        kind = str(field.annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")
        text = (field.description or described.get(name, "")).replace("|", "\\|")
        rows.append((f"`{prefix}{name.upper()}`", kind.replace("|", "\\|"), shown.replace("|", "\\|"), text))
    return rows


def settings_page() -> str:
    from ragstep import settings
    from ragstep.models import chat

    rows = _settings_rows(settings.Settings, "RAGSTEP_")
    chat_rows = _settings_rows(chat.ChatSettings, "RAGSTEP_CHAT_")
    out = [
        "# Settings",
        "",
        "Every setting is an environment variable (`RAGSTEP_<NAME>`, any case; lists and maps as JSON). Generated "
        "from `shared/ragstep/settings.py` by `docs/reference_gen.py`.",
        "",
        "| variable | type | default | what it does |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        "",
        "## Chat settings",
        "",
        "Per-request chat knobs (`chat` in a chat request), with their deployment defaults as `RAGSTEP_CHAT_<NAME>`.",
        "",
        "| variable | type | default | what it does |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in chat_rows),
    ]
    return "\n".join(out) + "\n"


def _options(parser: argparse.ArgumentParser) -> list[str]:
    lines = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
        text = (action.help or "").replace("|", "\\|").replace("%(default)s", str(action.default))
        lines.append(f"| {names} | {text} |")
    return lines


def _commands(parser: argparse.ArgumentParser, path: str, out: list[str], helps: dict[str, str]) -> None:
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        listed = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action._name_parser_map.items():
            full = f"{path} {name}"
            helps[full] = listed.get(name, "") or sub.description or ""
            out += [f"## `{full}`", "", helps[full] or "(no description)", ""]
            options = _options(sub)
            if options:
                out += ["| argument | what it does |", "|---|---|", *options, ""]
            _commands(sub, full, out, helps)


def cli_page() -> tuple[str, dict[str, str]]:
    from ragstep.entry.cli.main import build_parser

    parser = build_parser()
    out = [
        "# Command line",
        "",
        "Every command of `ragstep`, generated from its parser by `docs/reference_gen.py`.",
        "",
    ]
    helps: dict[str, str] = {}
    _commands(parser, "ragstep", out, helps)
    return "\n".join(out) + "\n", helps


def http_page() -> tuple[str, dict[str, str]]:
    import tempfile

    from ragstep.context import Clients
    from ragstep.entry.http.app import create_app
    from ragstep.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Clients(Settings(data_dir=Path(tmp))))
        spec = app.openapi()
    rows = []
    described: dict[str, str] = {}
    for path, operations in sorted(spec["paths"].items()):
        for method, op in operations.items():
            text = (op.get("description") or op.get("summary") or "").strip().split("\n\n")[0]
            text = " ".join(text.split())
            described[f"{method.upper()} {path}"] = text
            cell = text.replace("|", "\\|")
            rows.append(f"| `{method.upper()}` | `{path}` | {cell} |")
    extra = {
        "POST /mcp": "MCP over Streamable HTTP (stateless JSON-RPC): the tools of the MCP page",
        "GET /": "the web console",
    }
    for key, text in extra.items():
        method, path = key.split(" ", 1)
        if any(getattr(r, "path", None) == path for r in app.routes):
            described[key] = text
            rows.append(f"| `{method}` | `{path}` | {text} |")
    out = [
        "# HTTP API",
        "",
        "Every route, generated from the app by `docs/reference_gen.py`; `GET /openapi.json` is the full reference "
        "(request and response bodies, error statuses).",
        "",
        "| method | path | what it does |",
        "|---|---|---|",
        *rows,
    ]
    return "\n".join(out) + "\n", described


def pipelines_page() -> str:
    from ragstep.pipeline.definitions import PIPELINES

    out = ["# Pipelines", "", "Every declared pipeline and its steps, from `ragstep.pipeline.definitions`.", ""]
    for name, pipe in sorted(PIPELINES.items()):
        out += [f"## `{name}`", "", f"`{' -> '.join(pipe.stage_names())}`", ""]
    return "\n".join(out) + "\n"


def pages() -> dict[str, str]:
    cli, _ = cli_page()
    http, _ = http_page()
    return {
        "settings.md": settings_page(),
        "cli.md": cli,
        "http.md": http,
        "pipelines.md": pipelines_page(),
    }


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        (OUT / name).write_text(text, encoding="utf-8")
        print(f"wrote docs/reference/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
