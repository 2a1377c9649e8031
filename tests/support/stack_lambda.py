"""Lambda functions run as real Python 3.12 processes over their built layers, one warm process per function (an
execution environment: init once, then one invocation at a time), speaking a line protocol on stdin/stdout.

A worker sees what the python3.12 runtime gives a function: its code folder first, then each of its layers' python/
folders, then the runtime's boto3; nothing else (``-I -S``: no site-packages of the interpreter that runs it). Its
environment is the template's for that function, plus what Lambda sets (function name, task root, X-Ray daemon
address and trace header, ``AWS_EXECUTION_ENV``) and the endpoint of the moto server that stands in for AWS.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The worker: the runtime's part of the Lambda contract (load the handler at init, call it per event, report a
# raised exception as Lambda does: errorType is the exception's class name, which Step Functions matches on).
WORKER = r"""
import json, os, sys, time, traceback, uuid
code, paths = sys.argv[1], sys.argv[2:]
sys.path[:0] = [code, *paths]
protocol, sys.stdout = sys.stdout, sys.stderr  # the function's own prints and logs go to the log, not the protocol
module, _, name = os.environ["_HANDLER"].rpartition(".")
import importlib
handler = getattr(importlib.import_module(module), name)


class Context:
    def __init__(self, request_id, deadline):
        self.aws_request_id = request_id
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024"))
        self.invoked_function_arn = os.environ["RAGSTEP_TEST_FUNCTION_ARN"]
        self.log_group_name = "/aws/lambda/" + self.function_name
        self.log_stream_name = "built-stack-test"
        self._deadline = deadline

    def get_remaining_time_in_millis(self):
        return max(0, int((self._deadline - time.time()) * 1000))


protocol.write("READY\n")
protocol.flush()
for line in sys.stdin:
    request = json.loads(line)
    os.environ["_X_AMZN_TRACE_ID"] = request["trace"]
    context = Context(str(uuid.uuid4()), time.time() + request["timeout"])
    try:
        reply = {"ok": True, "payload": json.dumps(handler(request["event"], context))}
    except Exception as exc:
        error = {"errorMessage": str(exc), "errorType": type(exc).__name__, "requestId": context.aws_request_id,
                 "stackTrace": traceback.format_tb(exc.__traceback__)}
        reply = {"ok": False, "payload": json.dumps(error)}
    protocol.write(json.dumps(reply) + "\n")
    protocol.flush()
"""

TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


@dataclass
class Invocation:
    function: str
    event: Any
    ok: bool
    payload: str  # the response as Lambda sends it (the handler's result as JSON, or the error document)


@dataclass
class LambdaWorker:
    """One warm execution environment of one function."""

    name: str
    python: str
    code: Path
    paths: list[Path]
    env: dict[str, str]
    timeout_s: float
    log: Path
    _process: subprocess.Popen[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self._process = subprocess.Popen(
            [self.python, "-I", "-S", "-c", WORKER, str(self.code), *map(str, self.paths)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("a", encoding="utf-8"),
            env=self.env,
            text=True,
            encoding="utf-8",
            cwd=str(self.code),
        )
        assert self._process.stdout is not None
        ready = self._process.stdout.readline()
        if ready.strip() != "READY":
            raise RuntimeError(f"{self.name} failed at init: {self.log.read_text(encoding='utf-8')[-3000:]}")

    def invoke(self, event: Any) -> Invocation:
        with self._lock:  # an execution environment runs one invocation at a time
            if self._process is None:
                self.start()
            process = self._process
            assert process is not None and process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps({"event": event, "trace": TRACE_HEADER, "timeout": self.timeout_s}) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.name} died: {self.log.read_text(encoding='utf-8')[-3000:]}")
            reply = json.loads(line)
            return Invocation(self.name, event, reply["ok"], reply["payload"])

    def stop(self) -> None:
        if self._process is not None:
            if self._process.stdin is not None:
                self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


def lambda_environment(
    function_env: dict[str, str],
    *,
    name: str,
    arn: str,
    code: Path,
    handler: str,
    memory_mb: int,
    endpoint: str,
    region: str,
    xray_daemon: str,
    scratch: Path,
) -> dict[str, str]:
    """What a function's process sees: the template's variables and what Lambda itself sets."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        **function_env,
        "_HANDLER": handler,
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
        "LAMBDA_TASK_ROOT": str(code),
        "AWS_XRAY_DAEMON_ADDRESS": xray_daemon,
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        # Every AWS call goes to the moto server (boto3 honours AWS_ENDPOINT_URL).
        "AWS_ENDPOINT_URL": endpoint,
        "RAGSTEP_TEST_FUNCTION_ARN": arn,
    }
    # Lambda's /tmp belongs to one execution environment; here every function has a scratch folder of its own, so
    # nothing one function writes under RAGSTEP_DATA_DIR (/tmp/ragstep in the template) is seen by another.
    if env.get("RAGSTEP_DATA_DIR", "").startswith("/tmp"):
        env["RAGSTEP_DATA_DIR"] = str(scratch / env["RAGSTEP_DATA_DIR"].removeprefix("/tmp").lstrip("/"))
    return env
