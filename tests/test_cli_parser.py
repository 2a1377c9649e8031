"""The command line builds only the parser of the command that runs (issue #23); it must print and parse exactly as the
parser with every command built does.

Each case compares ``build_parser(lazily=True)``, the one :func:`ragstep.entry.cli.main.main` uses, with
``build_parser()``, which registers every command and action up front as the command line always did: the help of
the program, of every command and of every nested action, what a valid command line parses to, and the one-line
error of a bad one. The command lines are derived from the full parser itself, so a command or option added later
is covered without touching this file.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.entry.cli.main import COMMANDS, Commands, build_parser

ROOT = Path(__file__).resolve().parents[1]


def sub_commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers built for ``parser``'s sub-commands (argparse keeps no public list of them)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action._name_parser_map)
    return {}


def every_path(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (command path, parser) under ``parser``: ``("kb",)``, ``("kb", "list")``, ..."""
    for name, child in sub_commands(parser).items():
        yield (*path, name), child
        yield from every_path(child, (*path, name))


FULL = build_parser()
PATHS = dict(every_path(FULL))
LEAVES = {path: p for path, p in PATHS.items() if not sub_commands(p)}


def sample_value(action: argparse.Action) -> str:
    # "1" suits every type the command line uses (int, float, positive_int, port_number, retention_days, str).
    return str(next(iter(action.choices))) if action.choices else "1"


def valid_argv(path: tuple[str, ...], parser: argparse.ArgumentParser, *, every_option: bool) -> list[str]:
    """The positionals and required options of a leaf command, or (``every_option``) all of its options."""
    argv = list(path)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.dest == "data_dir":
            continue
        if not action.option_strings:
            argv.append(sample_value(action))
        elif action.required or every_option:
            argv.append(action.option_strings[-1])
            if action.nargs != 0:
                argv.append(sample_value(action))
    return argv


def outcome(parser: argparse.ArgumentParser, argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """What parsing ``argv`` does: the namespace (its command function by what it runs), or the exit status and what
    was printed."""
    capsys.readouterr()
    try:
        parsed = vars(parser.parse_args(argv))
    except SystemExit as exc:
        out, err = capsys.readouterr()
        return {"exit": exc.code, "out": out, "err": err}
    func = parsed.pop("func")
    # lazy() makes a new closure per build: compare the module and name it imports.
    cells = tuple(c.cell_contents for c in func.__closure__ or ())
    return {"args": parsed, "func": (func.__module__, func.__qualname__, cells)}


def test_the_table_lists_every_command_once_in_help_order() -> None:
    assert list(sub_commands(FULL)) == list(COMMANDS)
    listed = FULL.format_help()
    assert [listed.count(f"\n    {name} ") for name in COMMANDS] == [1] * len(COMMANDS)
    positions = [listed.index(f"\n    {name} ") for name in COMMANDS]
    assert positions == sorted(positions)
    for name, (help_text, _) in COMMANDS.items():
        assert " ".join(help_text.split()) in " ".join(listed.split()), name


def test_nothing_of_a_command_is_built_until_argparse_picks_it(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser(lazily=True)
    assert parser.format_help() == FULL.format_help()
    assert sub_commands(parser) == {}
    assert outcome(parser, ["search", "capital of australia", "--kb", "docs"], capsys)["args"]["kb"] == ["docs"]
    assert list(sub_commands(parser)) == ["search"]
    (commands,) = (a for a in parser._actions if isinstance(a, Commands))
    assert list(commands.choices or ()) == list(COMMANDS)  # every name is still a choice


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: " ".join(p) or "ragstep")
def test_help_is_the_same(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*path, "--help"]
    lazy, full = outcome(build_parser(lazily=True), argv, capsys), outcome(build_parser(), argv, capsys)
    assert lazy == full
    assert lazy["exit"] == 0 and lazy["out"] == (PATHS[path] if path else FULL).format_help()


@pytest.mark.parametrize("path", list(LEAVES), ids=" ".join)
def test_a_command_parses_the_same(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    leaf = LEAVES[path]
    cases = [
        valid_argv(path, leaf, every_option=False),
        valid_argv(path, leaf, every_option=True),
        # --data-dir before, after, in both places (the last wins), in its two spellings.
        ["--data-dir", "/d1", *valid_argv(path, leaf, every_option=False)],
        ["--data-dir=/d1", *valid_argv(path, leaf, every_option=False), "--data-dir", "/d2"],
        [*valid_argv(path, leaf, every_option=False), "--unknown-option"],
        [*valid_argv(path, leaf, every_option=False), "an-extra-argument"],
        list(path),
    ]
    for argv in cases:
        lazy = outcome(build_parser(lazily=True), argv, capsys)
        assert lazy == outcome(build_parser(), argv, capsys), argv
        assert lazy.get("exit") in (None, 2), (argv, lazy)  # a parse or a one-line error, nothing else


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--version"],
        ["--version", "search"],
        ["-h", "no-such-command"],
        ["no-such-command"],
        ["no-such-command", "--help"],
        ["sea", "capital"],  # argparse does not abbreviate command names
        ["kb", "lis"],  # nor action names
        ["search", "capital", "--js", "--to", "3"],  # but it does abbreviate options
        ["search", "capital", "--t", "3"],  # unless the abbreviation is ambiguous (--tag, --top-k)
        ["--data", "/d", "kb", "list"],  # --data-dir too
        ["--unknown-option", "kb", "list"],
        ["--data-dir"],
        ["search", "capital", "--data-dir"],
        ["-", "search"],
        ["--", "search", "capital"],
        ["kb"],
        ["bench"],
        ["usage", "--month", "--daily"],
        ["serve", "--port", "0"],
    ],
)
def test_edge_cases_parse_or_fail_the_same(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    lazy = outcome(build_parser(lazily=True), argv, capsys)
    assert lazy == outcome(build_parser(), argv, capsys)
    if lazy.get("exit") == 2:
        assert lazy["err"].startswith("ragstep: error: ") and lazy["err"].count("\n") == 1


def test_python_dash_m_and_the_console_script_entry_run_the_same_parser(tmp_path: Path) -> None:
    """``python -m ragstep`` and ``ragstep.entry.cli.main:main`` (the console script's entry point), as processes."""
    env = {"PYTHONPATH": str(ROOT / "shared"), "COLUMNS": "100", "PATH": "/usr/bin:/bin"}
    entry = "import sys; from ragstep.entry.cli.main import main; sys.exit(main())"
    runs = [
        subprocess.run(
            [sys.executable, *how, "--data-dir", str(tmp_path), "keys", "create", "--help"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        for how in (["-m", "ragstep"], ["-c", entry])
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout == runs[1].stdout
    assert runs[0].stdout.startswith("usage: ragstep keys create [-h] [--data-dir DATA_DIR]")


def test_every_argument_says_what_it_is() -> None:
    # `--help` and the generated reference (docs/reference/cli.md) show it; an empty cell there helps nobody.
    silent = [
        f"ragstep {' '.join(path)} {action.option_strings[0] if action.option_strings else action.dest}"
        for path, parser in PATHS.items()
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction) and not action.help
    ]
    assert silent == []
