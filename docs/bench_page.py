"""Writes ``docs/benchmarks.md``, the current benchmark figures, from the reports kept under ``bench-results/``.

Each report is the output of ``ragstep bench ... --json`` (or ``python -m ragstep.bench.embedder ... --json``), saved
as ``bench-results/<area>/<name>.json``. Its ``run`` record (written by ``--json``) says which benchmark made it, the
command, the UTC date, the machine and the code. The page shows each figure once: of the reports of one benchmark on
one subject (its set, or its corpus size), only the newest; the others are listed as superseded. The figures
themselves are rendered by the benchmark's own table (the one it prints without ``--json``), so the page says what
the command says, peers measured in the same run included.

A report this script cannot read (not JSON, an unknown kind, a layout its benchmark's table no longer reads) is left
out with a warning on stderr, never an error: reports from other branches and older code must not break the docs.

Run ``python docs/bench_page.py`` (``./dev docs`` does) after adding a report; ``tests/test_docs.py`` fails while the
page is out of date. The dated history of every run, with the discussion of each, is ``BENCHMARKS.md``.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench-results"
PAGE = ROOT / "docs" / "benchmarks.md"
sys.path.insert(0, str(ROOT / "shared"))

Renderer = Callable[[dict[str, Any]], str]


def _embedder_throughput(r: dict[str, Any]) -> str:
    """``python -m ragstep.bench.embedder --throughput`` prints JSON only: its table is written here."""
    lines = [f"{r['set']}: {r['passages']} passages, threads {r['threads']}", "", "texts a call   passages/s   runs s"]
    for size, row in r["batches"].items():
        lines.append(f"{size:>12}   {row['passages_per_s']:>10}   {' / '.join(str(s) for s in row['runs_s'])}")
    return "\n".join(lines)


def _embedder_engines(r: dict[str, Any]) -> str:
    """``python -m ragstep.bench.embedder --engines`` prints JSON only: its table is written here."""
    head = f"{r['set']}: {r['passages']} passages, {r['rounds']} rounds"
    lines = [head, "", "engine | passages/s | x first | CPU ms"]
    for label, row in r["engines"].items():
        lines.append(f"{label} | {row['passages_per_s']} | {row['speedup']} | {row['cpu_ms_per_passage']}")
    for label, m in r.get("dense", {}).items():
        lines.append(f"dense nDCG@10, {label}: {m['ndcg@10']:.4f}")
    return "\n".join(lines)


#: Every kind of report the page knows, in the page's order: title, the module whose ``render`` draws its table.
KINDS: dict[str, tuple[str, str | Renderer]] = {
    "quality": ("Retrieval quality: `ragstep bench quality`", "ragstep.bench.quality"),
    "profiles": ("Profiles: `ragstep bench profiles`", "ragstep.bench.profiles_bench"),
    "answer": ("Answers and citations: `ragstep bench answer`", "ragstep.bench.answer"),
    "latency": ("Latency at scale: `ragstep bench latency`", "ragstep.bench.latency"),
    "vectors": ("Quantised vectors: `ragstep bench vectors`", "ragstep.bench.vectors"),
    "s3snapshot": ("S3-snapshot index: `ragstep bench s3snapshot`", "ragstep.bench.s3snapshot_bench"),
    "chat": ("Chat: `ragstep bench chat`", "ragstep.bench.chat"),
    "ingest": ("Ingestion: `ragstep bench ingest`", "ragstep.bench.ingest_bench"),
    "ingest-e2e": ("Ingestion end to end: `ragstep bench ingest --end-to-end`", "ragstep.bench.ingest_e2e"),
    "embedder": ("Embedded embedding model: `python -m ragstep.bench.embedder`", "ragstep.bench.embedder"),
    "embedder-throughput": (
        "Embedding throughput: `python -m ragstep.bench.embedder --throughput`",
        _embedder_throughput,
    ),
    "embedder-engines": (
        "Embedding engines, same run: `python -m ragstep.bench.embedder --engines`",
        _embedder_engines,
    ),
    "cli": ("The command line: `ragstep bench cli`", "ragstep.bench.cli"),
    "coldstart": ("Cold start: `ragstep bench coldstart`", "ragstep.bench.coldstart"),
    "coldstart-chat": (
        "Cold start of the chat function: `ragstep bench coldstart --function chat`",
        "ragstep.bench.coldstart_chat",
    ),
    "package": ("Package size: `ragstep bench package`", "ragstep.bench.package"),
    "analysis": ("Data analysis: `ragstep bench analysis`", "ragstep.bench.analysis"),
    "viking": ("Hierarchical retrieval: `ragstep bench viking`", "ragstep.bench.viking"),
    "mcp": ("MCP: `ragstep bench mcp`", "ragstep.bench.mcp_bench"),
    "ocr": ("OCR: `ragstep bench ocr`", "ragstep.bench.ocr_bench"),
    "state-size": ("State size between stages: `ragstep bench state-size`", "ragstep.bench.state_size"),
}


class Report(NamedTuple):
    path: Path
    kind: str
    run: dict[str, Any]
    result: dict[str, Any]

    @property
    def subject(self) -> str:
        """What the figures are of: reports of one kind on one subject are one figure, and only the newest shows."""
        parts = [str(self.result[k]) for k in ("set", "docs", "function") if k in self.result]
        return " ".join(parts) or "latest run"

    @property
    def shown_path(self) -> str:
        return self.path.relative_to(self.path.parents[2]).as_posix()


def _guess_kind(result: dict[str, Any], folder: str) -> str | None:
    """The kind of a report written before ``--json`` recorded it: its folder's name, or its layout."""
    runs = result.get("runs")
    if isinstance(runs, dict) and runs and all(isinstance(v, dict) for v in runs.values()):
        if any("usd_per_1000" in v for v in runs.values()):
            return "profiles"
        if "ms_per_query" in result:
            return "quality"
        if "model_load_ms" in result:
            return "embedder"
    if "citation_precision" in result:
        return "answer"
    if "workloads" in result:
        return "ingest-e2e"
    if "batches" in result and "passages" in result:
        return "embedder-throughput"
    if "engines" in result and "passages" in result:
        return "embedder-engines"
    return folder if folder in KINDS else None


def _renderer(kind: str) -> Renderer:
    target = KINDS[kind][1]
    if callable(target):
        return target
    render: Renderer = importlib.import_module(target).render
    return render


def load(results: Path = RESULTS, warn: Callable[[str], None] | None = None) -> list[Report]:
    """Every report under ``results/<area>/`` this page can show; the others are named to ``warn``."""
    say = warn or (lambda msg: print(f"bench_page: {msg}", file=sys.stderr))
    reports = []
    for path in sorted(results.glob("*/*.json")):
        shown = path.relative_to(results.parent).as_posix()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            say(f"skipped {shown}: not a JSON report ({exc})")
            continue
        if not isinstance(data, dict):
            say(f"skipped {shown}: not a JSON object")
            continue
        run = data.pop("run", None) if isinstance(data.get("run"), dict) else None
        kind = (run or {}).get("kind") or _guess_kind(data, path.parent.name)
        if kind not in KINDS:
            say(f"skipped {shown}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
            continue
        reports.append(Report(path, kind, run or {}, data))
    return reports


def _section(report: Report, superseded: list[Report], warn: Callable[[str], None]) -> list[str] | None:
    try:
        table = _renderer(report.kind)(report.result).rstrip()
    except Exception as exc:  # a report the benchmark's table cannot read is left out, not fatal
        warn(f"skipped {report.shown_path}: its {report.kind} table does not read it ({type(exc).__name__}: {exc})")
        return None
    run = report.run
    out = [f"### {report.subject}", ""]
    out.append(f"- command: `{run['command']}`" if run.get("command") else "- command: not recorded in the report")
    out.append(f"- date: {run.get('date', 'not recorded')}; code: {run.get('code', 'not recorded')}")
    out.append(f"- machine: {run.get('machine', 'not recorded')}")
    if run.get("note"):
        out.append(f"- note: {run['note']}")
    out.append(f"- report: `{report.shown_path}`")
    if superseded:
        older = ", ".join(f"`{r.shown_path}` ({r.run.get('date', 'undated')})" for r in superseded)
        out.append(f"- superseded: {older}")
    return [*out, "", "```text", table, "```", ""]


HEADER = """\
# Benchmarks

The current figures: for each benchmark and subject, the newest run, its command, its date, the code it measured and
the machine, with the peers measured in the same run where the benchmark has them. Written by
`python docs/bench_page.py` from the `ragstep bench ... --json` reports kept under `bench-results/` in the repository
(do not edit this page: add a report and run the script; `tests/test_docs.py` fails while the page is out of date).
The dated history of every run, with what each one showed and why things changed, is `BENCHMARKS.md` at the root of
the repository.

The machine that ran most of them is small (2 vCPUs) and was shared with other work: every figure is a median (or a
p95) of one run, and only ratios measured inside one run compare. No test asserts a time.

To add a figure: run the command with `--json`, save its output as `bench-results/<area>/<name>.json`, run
`python docs/bench_page.py`.
"""


def page(results: Path = RESULTS, warn: Callable[[str], None] | None = None) -> str:
    say = warn or (lambda msg: print(f"bench_page: {msg}", file=sys.stderr))
    by_kind: dict[str, dict[str, list[Report]]] = {}
    for report in load(results, say):
        by_kind.setdefault(report.kind, {}).setdefault(report.subject, []).append(report)
    out = [HEADER]
    for kind, (title, _) in KINDS.items():
        sections: list[str] = []
        for subject in sorted(by_kind.get(kind, {})):
            newest, *older = sorted(
                by_kind[kind][subject], key=lambda r: (str(r.run.get("date", "")), r.shown_path), reverse=True
            )
            sections += _section(newest, older, say) or []
        if sections:
            out += [f"## {title}", "", *sections]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    PAGE.write_text(page(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT).as_posix()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
