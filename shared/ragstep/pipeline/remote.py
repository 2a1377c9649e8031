"""Running a pipeline on AWS Step Functions instead of in-process (``RAGSTEP_EXECUTOR=stepfunctions``).

:func:`run_remote` starts the EXPRESS state machine ``RAGSTEP_STATE_MACHINE_ARN`` with ``StartSyncExecution`` and
waits for it: one Lambda function per stage, the same stages in the same order as :func:`ragstep.pipeline.run_pipeline`
(the definition is generated from the same declaration). The state goes in and comes out through the claim check
(:mod:`ragstep.pipeline.transport`), so the caller gets exactly the :class:`~ragstep.models.PipelineState` the
in-process executor would return, and the API answers with the same JSON.

``StartSyncExecution`` answers HTTP 200 whatever became of the execution: the outcome is its ``status``.

* ``SUCCEEDED``: ``output`` is the last stage's state, decoded (offloaded results are read back from the blob store).
* ``FAILED``: the generated definition catches every error of a stage into a ``Fail`` state whose ``Error`` is the
  exception class name (what the Lambda runtime reports as ``errorType``) and whose ``Cause`` is the runtime's JSON
  (``{"errorMessage", "errorType", "requestId", "stackTrace"}``). A ragstep error the API answers with a 4xx
  in-process (``InputError`` 400, ``NotFoundError`` 404, ``ConflictError`` 409, ``StateTooLargeError`` 413) is
  raised again as the same class with the same message, so the HTTP client sees the same status and body. Anything
  else -- a ragstep 5xx, an unexpected exception, a Lambda or States error -- is an :class:`ExecutionFailedError`
  (502), whose message names the error and the execution but never an unexpected exception's text or stack.
* ``TIMED_OUT``: an :class:`ExecutionFailedError`.

Failing to start the execution at all (access denied, no such state machine, throttled after retries, network) is
an :class:`ExecutionFailedError` too.

The API answers with these messages, so they never carry an ARN or an account id (:func:`redact`: an ARN becomes its
resource part, ``stateMachine:ragstep-knowledge-search``); the full text, ARNs included, goes to this module's log
for the operator.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from ragstep import errors
from ragstep.errors import RagstepError
from ragstep.models import PipelineState
from ragstep.pipeline import transport
from ragstep.pipeline.definitions import payload_limit

if TYPE_CHECKING:
    from ragstep.context import Context


_log = logging.getLogger(__name__)

# arn:<partition>:<service>:<region>:<account>:<resource>; the resource part may hold ':' and '/'.
_ARN = re.compile(r"\barn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:(?:\d{12})?:([\w./:@+=*$-]+)")
_ACCOUNT_ID = re.compile(r"(?<![\w-])\d{12}(?![\w-])")


class ExecutionFailedError(RagstepError):
    """The state machine could not be started, or its execution did not succeed for a reason not the caller's."""

    http_status = 502
    code = "pipeline_failed"


def redact(text: str) -> str:
    """``text`` without ARNs (each becomes its resource part) and without 12-digit account ids: what a message may
    show to whoever called the API."""
    return _ACCOUNT_ID.sub("<account id>", _ARN.sub(r"\1", text))


def _public(cls: type[RagstepError], message: str) -> RagstepError:
    """``cls`` with ``message`` redacted; the full message is logged first (the operator needs the ARNs)."""
    public = redact(message)
    if public != message:
        _log.warning("%s: %s", cls.__name__, message)
    return cls(public)


def run_remote(state: PipelineState, ctx: Context, pipeline: str = "knowledge_search") -> PipelineState:
    """Run ``pipeline`` on the state machine ``ctx.settings.state_machine_arn`` and return its final state."""
    arn = ctx.settings.state_machine_arn
    if not arn:
        raise RagstepError(
            "RAGSTEP_EXECUTOR is 'stepfunctions' but RAGSTEP_STATE_MACHINE_ARN is not set; set it to the "
            "KnowledgeSearchStateMachineArn output of the stack, or set RAGSTEP_EXECUTOR=inprocess"
        )
    # The first step may be a Parallel state, whose output holds this input beside the branches' states.
    payload = transport.encode(state, ctx.blobs, payload_limit(pipeline, ctx.settings.state_limit_bytes))
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        response = ctx.clients.stepfunctions.start_sync_execution(
            stateMachineArn=arn,
            # The request id names the execution: the execution log and the stages' logs share it.
            name=state.request_id,
            input=json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
        )
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "ClientError")
        hint = ""
        if code in ("AccessDeniedException", "AccessDenied"):
            hint = "; the function's role needs states:StartSyncExecution on it"
        elif code == "StateMachineTypeNotSupported":
            hint = "; StartSyncExecution needs an EXPRESS state machine"
        detail = ": ".join(part for part in (code, error.get("Message") or "") if part)
        message = f"cannot start the {pipeline} state machine {arn}: {detail}{hint}"
        raise _public(ExecutionFailedError, message) from exc
    except BotoCoreError as exc:
        raise _public(ExecutionFailedError, f"cannot reach Step Functions to run {pipeline} ({arn}): {exc}") from exc
    return execution_result(response, ctx, pipeline)


def execution_result(response: dict[str, Any], ctx: Context, pipeline: str = "knowledge_search") -> PipelineState:
    """The final state of a finished execution (a ``StartSyncExecution`` or ``DescribeExecution`` response), or the
    error it ended with (see the module docstring)."""
    status = response.get("status")
    where = response.get("executionArn") or response.get("stateMachineArn") or "Step Functions"
    if status == "SUCCEEDED":
        output = response.get("output")
        if not output:
            raise _public(ExecutionFailedError, f"{pipeline} succeeded on {where} but returned no output")
        return transport.decode(output, ctx.blobs)
    if status == "FAILED":
        raise failure_error(response.get("error") or "", response.get("cause") or "", pipeline, where)
    if status == "TIMED_OUT":
        raise _public(ExecutionFailedError, f"{pipeline} timed out on Step Functions (execution {where})")
    message = f"{pipeline} ended with status {status!r} on Step Functions (execution {where})"
    raise _public(ExecutionFailedError, message)


def _runtime_error(cause: str) -> tuple[str, str]:
    """``(errorType, errorMessage)`` of a Lambda runtime error ``Cause``; ``("", "")`` when it is not one."""
    try:
        data = json.loads(cause)
    except ValueError:
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    return str(data.get("errorType") or ""), str(data.get("errorMessage") or "")


def _ragstep_error_class(name: str) -> type[RagstepError] | None:
    cls = getattr(errors, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, RagstepError) else None


def failure_error(error: str, cause: str, pipeline: str = "knowledge_search", where: str = "") -> RagstepError:
    """The exception a ``FAILED`` execution stands for (``error``/``cause`` as the execution reports them), with a
    message fit for the API's caller (:func:`redact`)."""
    error_type, message = _runtime_error(cause)
    name = error or error_type
    cls = _ragstep_error_class(name)
    execution = f" (execution {where})" if where else ""
    if cls is not None and cls.http_status < 500 and message:
        return _public(cls, message)
    if cls is not None and message:
        return _public(ExecutionFailedError, f"{pipeline} failed on Step Functions{execution}: {name}: {message}")
    if name.startswith("States."):
        # Errors of the service itself (States.Timeout, States.DataLimitExceeded ...): their cause is its own text.
        detail = f": {cause}" if cause and not error_type else ""
        return _public(ExecutionFailedError, f"{pipeline} failed on Step Functions{execution}: {name}{detail}")
    # An unexpected exception (KeyError ...) or a Lambda error (Sandbox.Timedout ...): say which, not its text.
    return _public(
        ExecutionFailedError,
        f"{pipeline} failed on Step Functions{execution}: {name or 'unknown error'}; the state machine's "
        "execution log has the details",
    )
