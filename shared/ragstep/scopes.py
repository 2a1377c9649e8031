"""What an API key may do: its scopes. Standard library only, so the command line's parser can list them without
importing the pydantic models (``ragstep --version`` must stay fast)."""

from __future__ import annotations

from typing import Literal

Scope = Literal["search", "chat", "ingest", "manage", "usage"]
#: Every scope, in the order listings print them.
SCOPES: tuple[Scope, ...] = ("search", "chat", "ingest", "manage", "usage")
#: What each scope lets a key do (the CLI's help and the README's table).
SCOPE_MEANING: dict[str, str] = {
    "search": "search knowledge bases and read their listings",
    "chat": "chat and read or delete the tenant's chat sessions",
    "ingest": "create knowledge bases, add and delete documents",
    "manage": "create tenants and keys (on the admin tenant: every tenant's)",
    "usage": "read the tenant's usage records",
}
