"""The state contract is versioned: the JSON schemas of the states the stages hand each other are committed
(``tests/data/state_schemas.json``), and a change to either schema without a new ``schema_version`` fails here.

A state machine execution may be in flight while a deploy replaces its functions, so a stage can receive a state
written by the previous version. A new stage reads the previous version's states (every field it added has a
default; ``schema_version`` accepts the previous value); an old stage refuses a newer state (``extra="forbid"``)
with a validation error, and the request fails rather than being misread. Regenerate the snapshot after bumping the
version: ``python tests/test_state_schema.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).resolve().parent / "data" / "state_schemas.json"


def current() -> dict[str, Any]:
    from ragstep.models import INGEST_SCHEMA_VERSION, SCHEMA_VERSION, IngestState, PipelineState

    return {
        "PipelineState": {"version": SCHEMA_VERSION, "schema": PipelineState.model_json_schema()},
        "IngestState": {"version": INGEST_SCHEMA_VERSION, "schema": IngestState.model_json_schema()},
    }


def test_a_schema_change_comes_with_a_new_version() -> None:
    committed = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    for name, now in current().items():
        before = committed[name]
        if now["schema"] != before["schema"]:
            assert now["version"] != before["version"], (
                f"{name}'s schema changed but its schema_version is still {now['version']!r}: bump it "
                "(ragstep.models) and regenerate the snapshot with `python tests/test_state_schema.py`"
            )
        else:
            assert now["version"] == before["version"], f"{name}: a new version without a schema change"


def test_a_state_of_the_previous_version_is_still_read() -> None:
    from ragstep.models import PipelineState

    old = {"schema_version": "1", "request": {"query": "cold starts", "knowledge_base_ids": ["kb"]}}
    state = PipelineState.model_validate(old)
    assert state.schema_version == "2" and state.profile == "standard"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
