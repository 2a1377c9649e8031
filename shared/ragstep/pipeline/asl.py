"""Amazon States Language for the declared pipelines: ``statemachine/*.asl.json`` is generated, never hand-edited.

    python -m ragstep.pipeline.asl --write statemachine/   # regenerate after changing definitions.py
    python -m ragstep.pipeline.asl --check statemachine/   # exit 1 when a committed definition has drifted
    python -m ragstep.pipeline.asl [PIPELINE]              # print a definition

Shape of a definition:

* Every :class:`Stage` (and a final :class:`Stream` step, whose function drains the events and returns the final
  state: a state machine has no way to relay them) is a ``Task`` named after the stage whose ``Resource`` is
  ``${<Stage>FunctionArn}`` (e.g. ``${ChunkSearchFunctionArn}``), filled in by the template's
  ``DefinitionSubstitutions``. The function ARN is the
  resource itself rather than ``arn:aws:states:::lambda:invoke`` with ``Payload.$``/``OutputPath``: both invoke the
  function synchronously with the same errors, but the direct form's result is exactly the handler's return value,
  while the optimised integration wraps it in an envelope (status code, executed version, SDK HTTP metadata) that
  counts against the 256 KiB payload quota before ``OutputPath`` strips it. The handlers fit the state to that quota
  (``ragstep.pipeline.transport.encode_for_lambda``), so nothing may be added around it.
* Each task retries only what AWS recommends retrying for Lambda (throttling and transient service errors): in the
  STANDARD ingest machine as AWS recommends (:data:`LAMBDA_RETRIER`); in the EXPRESS machines, whose caller waits,
  once, with a capped, jittered delay (:data:`EXPRESS_RETRIER`), and the whole execution has
  ``TimeoutSeconds`` (:data:`EXPRESS_TIMEOUT_SECONDS`) under the API's 30 s, so no retry outlives the request.
  Errors raised by our code (``InputError``, ``NotFoundError``, ...) are never retried: the same input fails the
  same way.
* The STANDARD machine's first task gets its input with the execution's ARN (:data:`EXECUTION_PARAMETERS`).
* Each task catches ``States.ALL`` into a ``Fail`` state named ``"<stage> failed"``, whose error and cause are the
  caught ``Error`` (the exception class name) and ``Cause`` (the runtime's JSON with the message). An EXPRESS
  execution started synchronously therefore ends ``FAILED`` with both, and the execution log names the stage.
* A :class:`Parallel` becomes a ``Parallel`` state followed by a ``"<name> join"`` task on ``${JoinFunctionArn}``
  (``ragstep.entry.aws.stage.join_handler``). Its first branch is a ``Pass`` state, so the join receives ``[input state,
  branch 1 state, ...]`` and adds each branch's results to the input, as the in-process executor does. Each item is
  a full state, and the array is one payload under the 256 KiB quota: in a pipeline with Parallel steps every
  handler (and the caller that starts the execution) encodes its state in an equal share of the quota
  (:func:`ragstep.pipeline.definitions.payload_limit`), the claim check offloading what does not fit. A branch's task
  keeps the retrier and catch of every task; a branch that fails fails the Parallel state with the branch's error,
  which it catches into ``"<name> failed"`` like a task (so an EXPRESS execution still ends ``FAILED`` with the
  stage's ``Error``, e.g. ``NotFoundError``).
* A :class:`Map` becomes an inline ``Map`` state followed by its merge stage's task. ``ItemsPath`` is the list in
  the state (at most ``max_items`` long), ``MaxConcurrency`` the step's; ``ItemSelector`` hands each iteration
  ``{"state": <the Map's input>, "item": <one item>}``, which the first stage's handler turns into the item's state
  (``ragstep.pipeline.mapping.item_state``); the last task of an iteration keeps only the item's result
  (``OutputPath``), and the Map's ``ResultPath`` puts the results, in the items' order, into its input. So the
  merge's input is one state plus at most ``max_items`` results, each cut from a state of one share of the quota:
  :func:`ragstep.pipeline.definitions.payload_limit` counts a Map as ``max_items`` branches. A Map that keeps
  nothing of its items (no ``result``: the ingest machine's ``embed_batches``, whose items write to the index) has
  ``ResultPath: null``, its output its input; its iterations output their item (Step Functions gathers the outputs
  under the quota before it drops them). ``MaxConcurrencyPath`` replaces ``MaxConcurrency`` where the step
  reads its concurrency from the state (a template parameter a stage put there). Tasks inside keep the
  retrier and catch of every task; a failing iteration fails the Map, caught into ``"<name> failed"``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ragstep.pipeline.definitions import DEPLOYED_PIPELINES, Map, Pipeline, Stage, Step, Stream

# https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html
LAMBDA_RETRIER: dict[str, Any] = {
    "ErrorEquals": [
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.ClientExecutionTimeoutException",
        "Lambda.TooManyRequestsException",
    ],
    "IntervalSeconds": 2,
    "MaxAttempts": 6,
    "BackoffRate": 2,
}
#: The EXPRESS machines answer a caller that waits (the API: API Gateway and its function give up at 30 s), so their
#: retrier is short: one retry after at most 2 s (full jitter spreads out the functions throttled together), and
#: the whole execution stops at :data:`EXPRESS_TIMEOUT_SECONDS`, leaving the API function time to answer with the
#: error. The STANDARD ingest machine has no one waiting and keeps AWS's recommended six attempts.
EXPRESS_RETRIER: dict[str, Any] = {
    "ErrorEquals": LAMBDA_RETRIER["ErrorEquals"],
    "IntervalSeconds": 1,
    "MaxAttempts": 1,
    "BackoffRate": 2,
    "MaxDelaySeconds": 2,
    "JitterStrategy": "FULL",
}
#: Under the API's 30 s (API Gateway's integration timeout and the API function's Timeout).
EXPRESS_TIMEOUT_SECONDS = 25
#: The input of the STANDARD (ingest) machine's first task: the S3 event it was started with, and the execution's
#: ARN, which the ingestion job following the upload records (``ragstep.app.s3_jobs``): reading the job asks that
#: execution how it ended when no stage could say.
EXECUTION_PARAMETERS: dict[str, str] = {"input.$": "$", "execution_arn.$": "$$.Execution.Id"}
JOIN_FUNCTION = "Join"
SUFFIX = ".asl.json"
GENERATED_MARKER = "generated by ragstep.pipeline.asl"


def function_logical_id(stage_name: str) -> str:
    """The template's logical id of a stage's function: ``chunk_search`` -> ``ChunkSearchFunction``."""
    return "".join(part[:1].upper() + part[1:] for part in stage_name.split("_") if part) + "Function"


def function_arn_placeholder(stage_name: str) -> str:
    """The ``DefinitionSubstitutions`` key of a stage's function ARN: ``ChunkSearchFunctionArn``."""
    return f"{function_logical_id(stage_name)}Arn"


def failed_state(name: str) -> str:
    return f"{name} failed"


def retrier(kind: str) -> dict[str, Any]:
    """The retrier of every task of a ``kind`` (EXPRESS or STANDARD) machine."""
    return copy.deepcopy(EXPRESS_RETRIER if kind == "EXPRESS" else LAMBDA_RETRIER)


def _task(name: str, placeholder: str, next_state: str | None, kind: str) -> dict[str, Any]:
    state: dict[str, Any] = {
        "Type": "Task",
        "Comment": f"{name}: Lambda function {placeholder.removesuffix('Arn')}",
        "Resource": f"${{{placeholder}}}",
        "Retry": [retrier(kind)],
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$", "Next": failed_state(name)}],
    }
    state.update({"Next": next_state} if next_state else {"End": True})
    return state


def _fail(what: str) -> dict[str, Any]:
    return {"Type": "Fail", "Comment": f"{what} failed", "ErrorPath": "$.Error", "CausePath": "$.Cause"}


def _machine(steps: Sequence[Step], kind: str) -> dict[str, Any]:
    """``{"StartAt", "States"}`` for a sequence of steps; error states follow the step they belong to."""
    if not steps:
        raise ValueError("a pipeline or branch needs at least one step")
    states: dict[str, Any] = {}
    names = [step.name for step in steps]
    for i, step in enumerate(steps):
        after = names[i + 1] if i + 1 < len(names) else None
        if isinstance(step, Stage | Stream):
            states[step.name] = _task(step.name, function_arn_placeholder(step.name), after, kind)
            states[failed_state(step.name)] = _fail(f"stage {step.name}")
            continue
        if isinstance(step, Map):
            states.update(_map(step, after, kind))
            continue
        join = f"{step.name} join"
        passthrough = f"{step.name} input"
        states[step.name] = {
            "Type": "Parallel",
            "Comment": "The first branch passes the input on, so the join sees it next to each branch's output",
            "Branches": [
                {"StartAt": passthrough, "States": {passthrough: {"Type": "Pass", "End": True}}},
                *(_machine(branch, kind) for branch in step.branches),
            ],
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$", "Next": failed_state(step.name)}],
            "Next": join,
        }
        states[failed_state(step.name)] = _fail(f"parallel step {step.name}")
        states[join] = _task(join, f"{JOIN_FUNCTION}FunctionArn", after, kind)
        states[failed_state(join)] = _fail(f"join of {step.name}")
    return {"StartAt": names[0], "States": states}


def _map(step: Map, after: str | None, kind: str) -> dict[str, Any]:
    """The Map state of ``step``, its merge task, and their Fail states."""
    processor = _machine(step.steps, kind)
    # The iteration's output is the item's result alone: the Map's output is its input plus these. A Map that keeps
    # nothing still gathers its iterations' outputs under the payload quota before dropping them: each is its item.
    last = processor["States"][step.steps[-1].name]
    last["OutputPath"] = f"$.{step.result or step.item}"
    kept = f"the results go to {step.results}" if step.results else "nothing is kept of them"
    concurrency = (
        {"MaxConcurrencyPath": f"$.{step.concurrency_path}"}
        if step.concurrency_path
        else {"MaxConcurrency": step.max_concurrency}
    )
    return {
        step.name: {
            "Type": "Map",
            "Comment": f"Each item of {step.items} with the whole state; {kept}",
            "ItemsPath": f"$.{step.items}",
            "ItemSelector": {"state.$": "$", "item.$": "$$.Map.Item.Value"},
            **concurrency,
            "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **processor},
            "ResultPath": f"$.{step.results}" if step.results else None,
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$", "Next": failed_state(step.name)}],
            "Next": step.merge,
        },
        failed_state(step.name): _fail(f"map step {step.name}"),
        step.merge: _task(step.merge, function_arn_placeholder(step.merge), after, kind),
        failed_state(step.merge): _fail(f"stage {step.merge}"),
    }


def _state_names(machine: dict[str, Any]) -> list[str]:
    names = list(machine["States"])
    for state in machine["States"].values():
        for branch in [*state.get("Branches", []), *([state["ItemProcessor"]] if "ItemProcessor" in state else [])]:
            names += _state_names(branch)
    return names


def definition(pipeline: Pipeline) -> dict[str, Any]:
    """The ASL document of ``pipeline`` (key order fixed, so the JSON is byte-for-byte stable)."""
    machine = _machine(pipeline.steps, pipeline.kind)
    if pipeline.kind == "STANDARD":
        machine["States"][machine["StartAt"]]["Parameters"] = dict(EXECUTION_PARAMETERS)
    names = _state_names(machine)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        # The States Language wants every state name unique in the whole machine, branches included.
        raise ValueError(f"pipeline {pipeline.name!r} uses the step names {duplicates} more than once")
    return {
        "Comment": (
            f"ragstep pipeline {pipeline.name!r} ({pipeline.kind}): {GENERATED_MARKER} from "
            "ragstep/pipeline/definitions.py; regenerate with `python -m ragstep.pipeline.asl --write statemachine/`"
        ),
        **machine,
        **({"TimeoutSeconds": EXPRESS_TIMEOUT_SECONDS} if pipeline.kind == "EXPRESS" else {}),
    }


def render(pipeline: Pipeline) -> str:
    return json.dumps(definition(pipeline), indent=2, ensure_ascii=False) + "\n"


def placeholders(pipeline: Pipeline) -> list[str]:
    """Every ``DefinitionSubstitutions`` key the definition of ``pipeline`` uses, in first-use order."""
    found: dict[str, None] = {}

    def walk(steps: Sequence[Step]) -> None:
        for step in steps:
            if isinstance(step, Stage | Stream):
                found[function_arn_placeholder(step.name)] = None
            elif isinstance(step, Map):
                walk(step.steps)
                found[function_arn_placeholder(step.merge)] = None
            else:
                for branch in step.branches:
                    walk(branch)
                found[f"{JOIN_FUNCTION}FunctionArn"] = None

    walk(pipeline.steps)
    return list(found)


def file_name(pipeline: Pipeline) -> str:
    return f"{pipeline.name}{SUFFIX}"


def _stale_files(folder: Path) -> list[Path]:
    """Generated definitions in ``folder`` whose pipeline is no longer declared."""
    expected = {file_name(p) for p in DEPLOYED_PIPELINES.values()}
    stale = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        if path.name not in expected and GENERATED_MARKER in path.read_text(encoding="utf-8"):
            stale.append(path)
    return stale


def write(folder: Path, pipelines: Sequence[Pipeline]) -> list[Path]:
    """Write the definitions (touching only files whose content changes); remove generated files of undeclared
    pipelines. Returns the paths written or removed."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for pipeline in pipelines:
        path = folder / file_name(pipeline)
        text = render(pipeline)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for path in _stale_files(folder):
        path.unlink()
        changed.append(path)
    return changed


def check(folder: Path, pipelines: Sequence[Pipeline]) -> list[str]:
    """One line per drifted, missing or stale definition file; empty when ``folder`` is up to date."""
    problems = []
    for pipeline in pipelines:
        path = folder / file_name(pipeline)
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != render(pipeline):
            problems.append(f"{path}: differs from the declaration of {pipeline.name!r}")
    for path in _stale_files(folder):
        problems.append(f"{path}: no pipeline {path.name.removesuffix(SUFFIX)!r} is declared")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ragstep.pipeline.asl", description="Generate the Step Functions definitions of the pipelines."
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", metavar="DIR", type=Path, help="write <pipeline>.asl.json files into DIR")
    mode.add_argument("--check", metavar="DIR", type=Path, help="exit 1 if the files in DIR differ from the output")
    parser.add_argument("pipelines", nargs="*", metavar="PIPELINE", help="only these pipelines (default: all)")
    args = parser.parse_args(argv)
    # In-process pipelines (Pipeline.deployed False) have no state machine.
    unknown = [name for name in args.pipelines if name not in DEPLOYED_PIPELINES]
    if unknown:
        parser.error(f"unknown pipeline {', '.join(unknown)}; deployed: {', '.join(sorted(DEPLOYED_PIPELINES))}")
    pipelines = [DEPLOYED_PIPELINES[name] for name in args.pipelines] or list(DEPLOYED_PIPELINES.values())

    if args.write is not None:
        for path in write(args.write, pipelines):
            print(f"{'removed' if not path.exists() else 'wrote'} {path}")
        return 0
    if args.check is not None:
        problems = check(args.check, pipelines)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print("regenerate with: python -m ragstep.pipeline.asl --write statemachine/", file=sys.stderr)
            return 1
        return 0
    for pipeline in pipelines:
        sys.stdout.write(render(pipeline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
