"""What a route depends on: the process's clients and the request's context (whose data it acts on).

Every route takes its :class:`~ragstep.context.Context` from :func:`request_context`, never from a global, so the
tenant a request acts for is decided in one place. Today that is the default tenant for every request (a single-user
server); authentication by API key resolves the tenant here.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ragstep.context import Clients, Context


def clients_of(request: Request) -> Clients:
    """The clients :func:`ragstep.entry.http.app.create_app` was built with (one set per process)."""
    clients: Clients = request.app.state.clients
    return clients


def request_context(request: Request) -> Context:
    """The context of this request's tenant."""
    return clients_of(request).context()


RequestContext = Annotated[Context, Depends(request_context)]
