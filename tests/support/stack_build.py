"""``sam build`` of template.yaml, as a deployment builds it, and the runtime's boto3 for the functions' processes.

aws-sam-cli pins its own boto3, pydantic and cfn-lint (installing it into the project's environment would downgrade
pydantic below the layers' pin), so it lives in an environment of its own under ``.tools/sam``, created on first use
(like the ASL validator under ``.tools``) and reused: :func:`sam_executable`. ``sam build`` runs the layers' Makefiles
(layers/build.sh downloads the Linux wheels; pip's cache makes a second build take seconds) and copies each
function's folder (SkipBuild); ``--cached`` skips whatever did not change since the last build.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"
SAM_VERSION = "1.170.0"
BUILD_ROOT = TOOLS / "built-stack"


class BuildUnavailable(Exception):
    """What the build needs cannot be had here (no PyPI, no Python 3.12): the test is skipped with the reason."""


def runtime_python() -> str:
    """The Python 3.12 of the functions' processes (``layers/runtime-python.sh``: the layers' bytecode is for it)."""
    found = subprocess.run([str(ROOT / "layers" / "runtime-python.sh")], capture_output=True, text=True, check=False)
    python = found.stdout.strip()
    if not python:
        raise BuildUnavailable("needs a Python 3.12 (python3.12 on PATH or RAGSTEP_LAYER_PYTHON) to run the functions")
    return python


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 900) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise BuildUnavailable(f"{' '.join(cmd[:3])} ... failed ({done.returncode}): {done.stderr[-2000:]}")


def sam_executable() -> Path:
    """``sam`` of aws-sam-cli ``SAM_VERSION`` in ``.tools/sam`` (installed there on first use), or the one
    ``RAGSTEP_TEST_SAM`` names (a SAM CLI installed otherwise)."""
    if os.environ.get("RAGSTEP_TEST_SAM"):
        return Path(os.environ["RAGSTEP_TEST_SAM"])
    venv = TOOLS / "sam"
    sam = venv / "bin" / "sam"
    stamp = venv / f".aws-sam-cli-{SAM_VERSION}"
    if sam.is_file() and stamp.is_file():
        return sam
    TOOLS.mkdir(exist_ok=True)
    if not (venv / "bin" / "python").is_file():
        _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"aws-sam-cli=={SAM_VERSION}"])
    stamp.write_text(SAM_VERSION + "\n", encoding="utf-8")
    return sam


def sam_build() -> Path:
    """The built stack (``sam build --cached``): its folder, holding the built template.yaml and one folder per
    function and layer."""
    sam = sam_executable()
    build = BUILD_ROOT / "build"
    env = dict(os.environ)
    # The Makefiles run python3 (pip for the wheels, jieba for the shared layer's table): the project's environment.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["RAGSTEP_LAYER_PYTHON"] = runtime_python()
    env["SAM_CLI_TELEMETRY"] = "0"
    _run(
        [str(sam), "build", "--template-file", str(ROOT / "template.yaml"), "--build-dir", str(build),
         "--cached", "--cache-dir", str(BUILD_ROOT / "cache")],
        env=env,
    )  # fmt: skip
    return build


def runtime_boto3() -> Path:
    """A folder with boto3 (and botocore, s3transfer ...) for the functions' processes: the python3.12 runtime's
    own copy, which the layers leave out. The version of the project's environment; pure Python."""
    version = importlib.metadata.version("boto3")
    target = BUILD_ROOT / f"runtime-boto3-{version}"
    stamp = target / ".complete"
    if stamp.is_file():
        return target
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", str(target), f"boto3=={version}"])
    stamp.write_text(version + "\n", encoding="utf-8")
    return target
