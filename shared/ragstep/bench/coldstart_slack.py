"""Cold start of the Slack webhook function: ``python -m ragstep.bench.coldstart_slack [--runs N]``.

Each run is a fresh process that loads ``functions/slack_webhook/app.py`` as the runtime does and answers one signed
request, timing the import and the first request. Two requests are measured: ``url_verification`` (signature check
only), and an ``event_callback`` mention (plus Powertools idempotency on SQLite and the hand-off's boto3 Lambda
client; the invoke itself fails fast here, without credentials, so the network round trip to Lambda -- tens of ms
in a region -- is not in the figure). Medians over ``--runs`` after one untimed warm-up run; it also lists any heavy
module (pydantic, numpy, ragstep's models or settings) the webhook loaded: there must be none.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from ragstep.bench.common import median, repo_root

CHILD = r"""
import time
t0 = time.perf_counter()
import hashlib, hmac, json, runpy, sys
handler = runpy.run_path(sys.argv[1], run_name="app")["handler"]
t1 = time.perf_counter()
body = sys.argv[2].encode()
ts = str(int(time.time()))
sig = "v0=" + hmac.new(b"bench-secret", f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
event = {"headers": {"x-slack-request-timestamp": ts, "x-slack-signature": sig}, "body": body.decode()}

class Context:
    function_name = "slack_webhook"
    memory_limit_in_mb = 1024
    aws_request_id = "bench"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:slack_webhook"

    def get_remaining_time_in_millis(self):
        return 3000

status = handler(event, Context())["statusCode"]
t2 = time.perf_counter()
heavy = [m for m in ("pydantic", "numpy", "jieba", "fastapi", "ragstep.models", "ragstep.settings") if m in sys.modules]
print(json.dumps({"import_ms": (t1 - t0) * 1000, "first_request_ms": (t2 - t1) * 1000, "status": status,
                  "heavy": heavy}))
"""

REQUESTS: dict[str, dict[str, Any]] = {
    "url_verification": {"type": "url_verification", "challenge": "bench"},
    "event_callback": {
        "type": "event_callback",
        "team_id": "T0",
        "event_id": "Ev0BENCH",
        "event": {"type": "app_mention", "user": "U0", "text": "<@UB> hi", "ts": "1.0", "channel": "C0"},
    },
}


def run(runs: int) -> dict[str, dict[str, object]]:
    app = repo_root() / "functions" / "slack_webhook" / "app.py"
    report: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(repo_root() / "shared"),
            "RAGSTEP_DATA_DIR": tmp,
            "RAGSTEP_SLACK_SIGNING_SECRET": "bench-secret",
            "RAGSTEP_IDEMPOTENCY_BACKEND": "sqlite",
            "RAGSTEP_SLACK_WORKER_FUNCTION": "bench-worker",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        for name, request in REQUESTS.items():
            rows = []
            for i in range(runs + 1):
                body = dict(request, event_id=f"Ev0BENCH{i}") if "event_id" in request else request
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(app), json.dumps(body)],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            timed = rows[1:]
            report[name] = {
                "import_ms": round(median([r["import_ms"] for r in timed]), 1),
                "first_request_ms": round(median([r["first_request_ms"] for r in timed]), 1),
                "total_ms": round(median([r["import_ms"] + r["first_request_ms"] for r in timed]), 1),
                "statuses": sorted({r["status"] for r in timed}),
                "heavy_modules": sorted({m for r in timed for m in r["heavy"]}),
            }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragstep.bench.coldstart_slack")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.runs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
