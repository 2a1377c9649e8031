"""``ragstep bench coldstart --function chat``: what a new environment of the streaming chat function pays before its
first streamed token, started the way the AWS Lambda Web Adapter starts it.

The adapter runs the function's Handler (``functions/api/run.sh``) as a command, polls the readiness path until the
app answers, then forwards the invocation as an HTTP request. Each run here does the same with a fresh process:

* ``ready``: from starting ``run.sh`` until ``GET /healthz`` answers 200 (interpreter start, imports, the app and its
  clients, the common chat pipelines' stages): the environment's init;
* ``first token``: from sending ``POST /v1/chat/completions`` (``stream: true``, the extractive model, an API key,
  the demo knowledge base) until the first frame with answer text arrives;
* ``total``: their sum, what the first caller of a new environment waits for beyond Lambda's own start-up (the
  runtime and the adapter's layer are outside it: they are not ours to measure here).

The demo documents are indexed once in a temporary data dir; one untimed warm-up run comes first (bytecode and OS
file cache in place, as in a layer built with bytecode); the report gives medians over ``--runs``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragstep.bench.common import median, repo_root
from ragstep.errors import InputError

#: The adapter's settings of ``ChatStreamFunction`` in template.yaml (tests/test_stream_url.py keeps them equal).
ADAPTER_ENV = {
    "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
    "AWS_LWA_INVOKE_MODE": "response_stream",
    "AWS_LWA_PORT": "8080",
    "AWS_LWA_READINESS_CHECK_PATH": "/healthz",
}
QUESTION = "How are keyword and vector results fused?"
PHASES = ("ready_ms", "first_token_ms", "total_ms")
#: How often the readiness path is polled while the app starts.
POLL_S = 0.01


def run_sh() -> Path:
    """The streaming chat function's Handler command."""
    path = repo_root() / "functions" / "api" / "run.sh"
    if not path.is_file():
        raise InputError(f"{path} is missing: run this from a clone of the repository")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Function:
    """A running function process: its base URL, and how long it took to become ready."""

    process: subprocess.Popen[bytes]
    base: str
    ready_ms: float


def _ready(port: int, path: str) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


@contextlib.contextmanager
def start_function(env: dict[str, str], timeout_s: float = 60.0) -> Iterator[Function]:
    """Start ``run.sh`` with ``env`` (on a free port) and wait until its readiness path answers, as the adapter
    does; on exit, SIGTERM (Lambda's shutdown) and wait for the process."""
    port = free_port()
    env = {**env, "AWS_LWA_PORT": str(port)}
    command = run_sh()
    started = time.perf_counter()
    process = subprocess.Popen(
        [str(command)], cwd=command.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = started + timeout_s
        path = env.get("AWS_LWA_READINESS_CHECK_PATH", "/")
        while not _ready(port, path):
            if process.poll() is not None or time.perf_counter() > deadline:
                output = process.stdout.read().decode(errors="replace") if process.stdout else ""
                lines = output.strip().splitlines()[-5:] or [f"exit status {process.returncode}"]
                raise RuntimeError("the function did not become ready: " + " | ".join(lines))
            time.sleep(POLL_S)
        ready_ms = (time.perf_counter() - started) * 1000.0
        yield Function(process, f"http://127.0.0.1:{port}", ready_ms)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout:
            process.stdout.close()


def function_env(data_dir: Path) -> dict[str, str]:
    """The environment of a local run: the adapter's settings, API keys required (as deployed), local stores in
    ``data_dir``, and this interpreter as the ``python`` that ``run.sh`` starts."""
    from ragstep.bench.coldstart import child_env

    env = child_env(data_dir) | ADAPTER_ENV | {"RAGSTEP_AUTH": "required"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def first_token_ms(base: str, key: str, kb_id: str, question: str = QUESTION) -> tuple[float, str]:
    """Milliseconds until the first frame with answer text, and the whole answer."""
    import httpx

    body = {"model": "ragstep", "stream": True, "messages": [{"role": "user", "content": question}]}
    body["knowledge_base_ids"] = [kb_id]
    started = time.perf_counter()
    first: float | None = None
    answer = []
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers, timeout=60) as response:
        if response.status_code != 200:
            raise RuntimeError(f"the chat request failed: {response.status_code} {response.read().decode()[:200]}")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[len("data: ") :]).get("choices") or [{}]
            text = (choices[0].get("delta") or {}).get("content")
            if text:
                first = first if first is not None else (time.perf_counter() - started) * 1000.0
                answer.append(text)
    if first is None:
        raise RuntimeError("the stream carried no answer text")
    return first, "".join(answer)


def one_run(env: dict[str, str], key: str, kb_id: str) -> dict[str, float]:
    with start_function(env) as function:
        token_ms, _ = first_token_ms(function.base, key, kb_id)
    return {"ready_ms": function.ready_ms, "first_token_ms": token_ms, "total_ms": function.ready_ms + token_ms}


def run_chat_coldstart(runs: int = 5) -> dict[str, Any]:
    """Median phases of ``runs`` fresh function processes (after one warm-up)."""
    if runs < 1:
        raise InputError("--runs must be at least 1")
    from ragstep.app.keys import create_key
    from ragstep.bench.coldstart import build_demo_index
    from ragstep.context import Clients
    from ragstep.settings import Settings

    with tempfile.TemporaryDirectory(prefix="ragstep-bench-coldstart-chat-") as tmp:
        data_dir = Path(tmp) / "data"
        kb_id = build_demo_index(data_dir)
        key = create_key(Clients(Settings(data_dir=data_dir)).keys, "default", ["chat"]).secret
        env = function_env(data_dir)
        one_run(env, key, kb_id)  # warm-up: bytecode, file cache
        samples = [one_run(env, key, kb_id) for _ in range(runs)]
    return {
        "function": "chat (ChatStreamFunction: functions/api/run.sh under the Lambda Web Adapter's start-up)",
        "runs": runs,
        "python": sys.version.split()[0],
        "question": QUESTION,
        **{phase: round(median([s[phase] for s in samples]), 1) for phase in PHASES},
    }


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"cold start of the streaming chat function: median of {r['runs']} fresh processes (Python {r['python']})",
            f"question: {r['question']} (extractive model)",
            f"ready (start -> /healthz 200): {r['ready_ms']} ms",
            f"first streamed token: {r['first_token_ms']} ms",
            f"total: {r['total_ms']} ms",
        ]
    )
