"""The data-analysis sandbox's processes: every model-written query runs in a process of its own with hard limits.

DuckDB's ``memory_limit`` covers its buffer manager, not the scalar list and string functions (``range(2e8)``,
``repeat('x', 1.5e9)``, ``lpad(...)``), and :meth:`DuckDBPyConnection.interrupt` is only looked at between vectors,
so one such call could hold a request for minutes and take gigabytes. The kernel bounds them instead:

* A **fork server** (one per process, started with its first session: ``python -c ...serve_forks(fd)``; DuckDB and
  the loaders imported, no database open; a process forked later starts its own) forks a **session process** per
  request. The session process loads the request's files into its in-memory DuckDB, locks
  it, and checks each query with the parser guard.
* Each checked query is run by a **query process** forked from the session process (the loaded tables are shared
  copy-on-write), which before running sets ``RLIMIT_AS`` to its current address space plus the memory limit plus
  :data:`HEADROOM_MB`, ``RLIMIT_CPU`` to the timeout rounded up plus one second, and a real-time alarm
  (``SIGALRM``, default action: the kernel ends the process) at the timeout plus :data:`ALARM_GRACE_S`. DuckDB's
  own interrupt still comes first, at the timeout, for the ordinary case (a cross join). An allocation past the
  address-space limit fails inside DuckDB (``Out of Memory``) or ends the process; either way the request gets
  ``failed`` and goes on.
* The session process reads the result from a pipe until the timeout plus :data:`KILL_GRACE_S`, then ``SIGKILL``s
  the query process, and reaps it with ``wait4``: the kernel's peak RSS of the process that ran the query is part
  of every answer (:class:`~ragstep.models.analysis.QueryCost`, shown in the trace). The requesting process waits
  at most the timeout plus :data:`REPLY_GRACE_S` (under one second) and then kills the session process too.

Only ``socketpair``, pipes, ``fork`` and signals are used: no ``multiprocessing`` (its queues and pools need
``/dev/shm``, which AWS Lambda does not have). Messages are length-prefixed JSON; nothing is unpickled.

Cost (``ragstep bench analysis`` measures it): a session is one ``fork`` of the idle fork server; a query costs a
fixed overhead over the same query on the same engine in-process, whatever the number of rows loaded (the fork
shares the pages, it does not copy them). The fork server starts once per process (Python and DuckDB imported) and
stays resident.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, Protocol

from ragstep.models.analysis import AnalysisError, DataTable, QueryCost, QueryResult

#: Address space a query process may add beyond DuckDB's memory limit (Python, DuckDB's own structures, result).
HEADROOM_MB = 64
#: The query process ends itself (``SIGALRM``) this long after the timeout, if DuckDB's interrupt did not stop it.
ALARM_GRACE_S = 0.15
#: The session process kills the query process this long after the timeout (and then measures and answers).
KILL_GRACE_S = 0.25
#: The requesting process kills the session process this long after the timeout (the README's "timeout + 1 s"):
#: the gap after KILL_GRACE_S is for a busy machine to schedule the session process's answer, the rest of the second
#: for it to schedule the requesting thread.
REPLY_GRACE_S = 0.8
#: Loading a file (at most ``data_analysis_max_file_bytes``) and starting the fork server: generous, never endless.
LOAD_TIMEOUT_S = 120.0
_HEADER = struct.Struct("!I")


class Engine(Protocol):
    """What a session process runs: :class:`ragstep.adapters.analysis.duckdb.DuckDBSession`."""

    memory_limit_mb: int
    timeout_s: float

    def load(self, knowledge_id: str, path: str, fmt: str) -> list[DataTable]: ...
    def lock(self) -> None: ...
    def check(self, sql: str) -> str: ...
    def run(self, checked: str) -> QueryResult: ...
    def close(self) -> None: ...


#: Builds a session process's engine from the limits (memory_limit_mb, timeout_s, max_rows).
EngineFactory = Callable[[dict[str, Any]], Engine]


# -- framing -------------------------------------------------------------------------------------------------------


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, ensure_ascii=False).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    while n:
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, deadline: float | None = None) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    value: dict[str, Any] = json.loads(_recv_exact(sock, size, deadline))
    return value


def _error(exc: AnalysisError) -> dict[str, Any]:
    return {"error": [exc.reason, exc.message]}


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _vm_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


# -- the query process ---------------------------------------------------------------------------------------------


def _run_limited(engine: Engine, sql: str, out: int) -> None:
    """In the forked query process: limits first, then the query; the answer goes to ``out``. Never returns."""
    try:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, engine.timeout_s + ALARM_GRACE_S)
        cpu = math.ceil(engine.timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        space = _vm_bytes() + (engine.memory_limit_mb + HEADROOM_MB) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (space, space))
        try:
            result = engine.run(sql)
            message: dict[str, Any] = {"result": asdict(result)}
        except AnalysisError as exc:
            message = _error(exc)
        except MemoryError:
            message = _error(AnalysisError("failed", f"the query needs more than {engine.memory_limit_mb} MB"))
        data = json.dumps(message, ensure_ascii=False).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]
    finally:
        os._exit(0)


def _stopped(status: int, engine: Engine) -> AnalysisError:
    """Why a query process ended without an answer."""
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGKILL, signal.SIGALRM, signal.SIGXCPU):
        return AnalysisError("timeout", f"the query ran longer than {engine.timeout_s:g}s and was stopped")
    return AnalysisError(
        "failed",
        f"the query was stopped: it went past the sandbox's limits ({engine.memory_limit_mb} MB, "
        f"{engine.timeout_s:g}s)",
    )


def run_isolated(engine: Engine, sql: str) -> dict[str, Any]:
    """Check ``sql``, run it in a query process under the limits, and answer with its result and cost."""
    try:
        checked = engine.check(sql)
    except AnalysisError as exc:
        return _error(exc)
    base_kb = _rss_kb()
    started = time.monotonic()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the query process (its coverage is its answer)
        os.close(read_end)
        _run_limited(engine, checked, write_end)
    os.close(write_end)
    deadline = started + engine.timeout_s + KILL_GRACE_S
    chunks: list[bytes] = []
    killed = False
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                killed = True
                break
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status, usage = os.wait4(pid, 0)
    cost = {
        "elapsed_ms": round((time.monotonic() - started) * 1000, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "base_rss_mb": round(base_kb / 1024, 1),
    }
    if killed or not chunks:
        return {**_error(_stopped(status, engine)), "cost": cost}
    return {**json.loads(b"".join(chunks)), "cost": cost}


# -- the session process -------------------------------------------------------------------------------------------


def serve_session(sock: socket.socket, engine: Engine) -> None:
    """The session process's loop: one request at a time until the requesting side closes its end."""
    try:
        while True:
            try:
                request = _recv(sock)
            except (EOFError, OSError):
                return
            op = request.get("op")
            try:
                if op == "load":
                    tables = engine.load(str(request["knowledge_id"]), str(request["path"]), str(request["fmt"]))
                    reply: dict[str, Any] = {"tables": [asdict(t) for t in tables]}
                elif op == "lock":
                    engine.lock()
                    reply = {"ok": True}
                elif op == "check":
                    reply = {"sql": engine.check(str(request["sql"]))}
                elif op == "query":
                    reply = run_isolated(engine, str(request["sql"]))
                else:
                    reply = _error(AnalysisError("failed", f"unknown sandbox request {op!r}"))
            except AnalysisError as exc:
                reply = _error(exc)
            _send(sock, reply)
    finally:
        engine.close()


def serve_forks(fd: int, engine: EngineFactory) -> None:
    """The fork server's loop: each message carries a socket and the limits; a session process is forked for it and
    its pid answered. Ends when the requesting process closes its end (or exits)."""
    control = socket.socket(fileno=fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # session processes are reaped by the kernel
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, 4096, 1)
        except OSError:
            return
        if not message or not fds:
            return
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the session process
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # it waits for its own query processes
            try:
                serve_session(socket.socket(fileno=fds[0]), engine(json.loads(message)))
            finally:
                os._exit(0)
        os.close(fds[0])
        control.sendall(_HEADER.pack(pid))


# -- the requesting side -------------------------------------------------------------------------------------------


def _close_server(control: socket.socket, process: subprocess.Popen[bytes]) -> None:
    control.close()  # the fork server reads end-of-file and exits
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ForkServer:
    """Starts the fork server on first use and hands out session processes; thread-safe (one lock per hand-out).
    ``entry`` is the importable ``module:function`` the fork server runs with its socket's descriptor."""

    def __init__(self, entry: str) -> None:
        self._entry = entry
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._owner = os.getpid()

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        # The child imports what this process imports: the same sys.path (a Lambda's /var/task and /opt/python too).
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        module, function = self._entry.split(":")
        code = f"from {module} import {function}; {function}({theirs.fileno()})"
        # No stdout: a reader of this process's output (`ragstep chat ... | jq`) must not wait for the fork server.
        process = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        weakref.finalize(self, _close_server, ours, process)
        return ours

    def open(self, limits: dict[str, Any]) -> tuple[socket.socket, int]:
        """A connected socket to a new session process, and its pid."""
        with self._lock:
            if self._owner != os.getpid():  # this process was forked: the socket is its parent's fork server's
                self._control, self._owner = None, os.getpid()
            for attempt in (1, 2):
                if self._control is None:
                    self._control = self._start()
                ours, theirs = socket.socketpair()
                try:
                    socket.send_fds(self._control, [json.dumps(limits).encode()], [theirs.fileno()])
                    (pid,) = _HEADER.unpack(_recv_exact(self._control, _HEADER.size, time.monotonic() + LOAD_TIMEOUT_S))
                    return ours, pid
                except (OSError, EOFError):
                    ours.close()
                    self._control.close()
                    self._control = None  # the fork server is gone: start another, once
                    if attempt == 2:
                        raise AnalysisError("failed", "the data-analysis sandbox could not be started") from None
                finally:
                    theirs.close()
                    if self._control is not None:
                        self._control.settimeout(None)
        raise AssertionError("unreachable")


class SandboxSession:
    """The requesting side of one session process: the :class:`~ragstep.ports.AnalysisSession` the stage uses."""

    def __init__(self, server: ForkServer, *, memory_limit_mb: int, timeout_s: float, max_rows: int) -> None:
        self.memory_limit_mb = memory_limit_mb
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        limits = {"memory_limit_mb": memory_limit_mb, "timeout_s": timeout_s, "max_rows": max_rows}
        self._sock, self._pid = server.open(limits)
        self._dead = ""

    def _call(self, request: dict[str, Any], wait_s: float) -> dict[str, Any]:
        if self._dead:
            raise AnalysisError("failed", self._dead)
        started = time.monotonic()
        try:
            _send(self._sock, request)
            reply = _recv(self._sock, started + wait_s)
        except TimeoutError:
            self._stop("an earlier query was stopped with its sandbox")
            raise AnalysisError("timeout", f"the query ran longer than {self.timeout_s:g}s and was stopped") from None
        except (OSError, EOFError):
            self._stop("the sandbox process ended")
            raise AnalysisError("failed", "the data-analysis sandbox process ended unexpectedly") from None
        if "error" in reply:
            reason, message = reply["error"]
            error = AnalysisError(str(reason), str(message))
            if "cost" in reply:
                error.cost = QueryCost(**reply["cost"])
            raise error
        return reply

    def _stop(self, why: str) -> None:
        self._dead = why
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)
        self._sock.close()

    def load(self, knowledge_id: str, path: str, fmt: str) -> list[DataTable]:
        reply = self._call({"op": "load", "knowledge_id": knowledge_id, "path": path, "fmt": fmt}, LOAD_TIMEOUT_S)
        return [
            DataTable(
                name=t["name"],
                knowledge_id=t["knowledge_id"],
                sheet=t["sheet"],
                columns=tuple((str(n), str(k)) for n, k in t["columns"]),
                row_count=int(t["row_count"]),
                sample_rows=tuple(tuple(str(v) for v in row) for row in t["sample_rows"]),
            )
            for t in reply["tables"]
        ]

    def lock(self) -> None:
        self._call({"op": "lock"}, LOAD_TIMEOUT_S)

    def check(self, sql: str) -> str:
        return str(self._call({"op": "check", "sql": sql}, self.timeout_s + REPLY_GRACE_S)["sql"])

    def query(self, sql: str) -> QueryResult:
        reply = self._call({"op": "query", "sql": sql}, self.timeout_s + REPLY_GRACE_S)
        r = reply["result"]
        return QueryResult(
            columns=tuple(str(c) for c in r["columns"]),
            rows=tuple(tuple(str(v) for v in row) for row in r["rows"]),
            truncated=bool(r["truncated"]),
            elapsed_ms=float(r["elapsed_ms"]),
            cost=QueryCost(**reply["cost"]),
        )

    def close(self) -> None:
        if not self._dead:
            self._dead = "the session is closed"
            self._sock.close()  # the session process reads end-of-file, closes its database and exits

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
