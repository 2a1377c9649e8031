"""``ragstep tenants create|list``, ``ragstep keys create|list|revoke`` and ``ragstep usage``.

The command line administers the server's own key and usage stores directly (whoever can run it on the data dir
or with the AWS role owns the deployment), so it acts for any tenant; the HTTP admin routes are the same use cases
behind a ``manage`` key.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ragstep.entry.cli.common import context_of, positive_int, print_json, require_data
from ragstep.entry.cli.console import table
from ragstep.scopes import SCOPE_MEANING, SCOPES

if TYPE_CHECKING:
    from ragstep.models.tenancy import ApiKey

# models.DEFAULT_TENANT, spelled out: importing the models (pydantic) would cost every `ragstep` start ~0.3 s.
DEFAULT_TENANT = "default"


def _when(instant: float | None) -> str:
    if instant is None:
        return "-"
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%d %H:%M")


def _key_json(key: ApiKey) -> dict[str, Any]:
    return key.model_dump(mode="json", exclude={"key_hash"})


def cmd_tenants_create(args: argparse.Namespace) -> int:
    from ragstep.app.tenants import create_tenant

    tenant = create_tenant(
        context_of(args).clients.keys,
        args.tenant_id,
        name=args.name or "",
        daily_requests=args.daily_requests,
        daily_tokens=args.daily_tokens,
        monthly_requests=args.monthly_requests,
        monthly_tokens=args.monthly_tokens,
        monthly_budget_usd=args.monthly_budget_usd,
    )
    if args.json:
        print_json(tenant.model_dump(mode="json"))
    else:
        print(f"created tenant {tenant.id}; make it a key with `ragstep keys create --tenant {tenant.id} --scope ...`")
    return 0


def cmd_tenants_list(args: argparse.Namespace) -> int:
    from ragstep.app.tenants import list_tenants

    require_data(args, "keys")
    clients = context_of(args).clients
    tenants = list_tenants(clients.keys)
    if args.json:
        print_json([t.model_dump(mode="json") for t in tenants])
        return 0
    keys = clients.keys.list_keys()
    rows = []
    for t in tenants:
        active = sum(1 for k in keys if k.tenant_id == t.id and k.status(time.time()) == "active")
        daily = f"{t.daily_requests if t.daily_requests is not None else '-'}/{t.daily_tokens or '-'}"
        monthly = f"{t.monthly_requests if t.monthly_requests is not None else '-'}/{t.monthly_tokens or '-'}"
        budget = "-" if not t.monthly_budget_usd else f"${t.monthly_budget_usd:g}"
        rows.append((t.id, t.name or "-", active, daily, monthly, budget, _when(t.created_at or None)))
    heads = ("tenant", "name", "active keys", "daily requests/tokens", "monthly requests/tokens", "budget", "created")
    print(table(heads, rows))
    return 0


def _dollars(text: str) -> float:
    """An argparse type: an amount in USD above 0."""
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an amount in USD such as 25 or 2.50, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _scopes(values: list[str]) -> list[str]:
    return [s.strip() for value in values for s in value.split(",") if s.strip()]


def cmd_keys_create(args: argparse.Namespace) -> int:
    from ragstep.app.keys import create_key, parse_expiry

    made = create_key(
        context_of(args).clients.keys,
        args.tenant,
        _scopes(args.scope),
        name=args.name or "",
        knowledge_bases=args.kb or (),
        expires_at=parse_expiry(args.expires) if args.expires else None,
        rate_per_second=args.rate,
        burst=args.burst,
    )
    if args.json:
        print_json({**_key_json(made.key), "key": made.secret})
        return 0
    key = made.key
    print(made.secret)
    limits = f"; knowledge bases: {', '.join(key.knowledge_bases)}" if key.knowledge_bases else ""
    expiry = f"; expires {_when(key.expires_at)} UTC" if key.expires_at else ""
    print(
        f"key {key.prefix} for tenant {key.tenant_id} (scopes: {', '.join(key.scopes)}{limits}{expiry}). "
        "Store it now: it is not shown again.",
        file=sys.stderr,
    )
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    require_data(args, "keys")
    keys = context_of(args).clients.keys.list_keys(args.tenant)
    if args.json:
        print_json([_key_json(k) for k in keys])
        return 0
    if not keys:
        print("no API keys yet; make one with `ragstep keys create --scope search`")
        return 0
    now = time.time()
    rows = [
        (
            k.prefix,
            k.tenant_id,
            k.name or "-",
            ",".join(k.scopes),
            ",".join(k.knowledge_bases) or "all",
            k.status(now),
            _when(k.expires_at),
        )
        for k in keys
    ]
    print(table(("prefix", "tenant", "name", "scopes", "knowledge bases", "status", "expires"), rows))
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    from ragstep.app.keys import revoke_key

    key = revoke_key(context_of(args).clients.keys, args.prefix)
    print(f"revoked key {key.prefix} of tenant {key.tenant_id}")
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    from ragstep.app.usage import counted_report, parse_instant, usage_report
    from ragstep.errors import InputError

    start = parse_instant(args.start) if args.start else None
    end = parse_instant(args.end) if args.end else None
    require_data(args, "usage")
    store = context_of(args).clients.usage
    if args.month or args.daily:
        if args.group_by is not None:
            raise InputError(
                "--month and --daily read the per-tenant counters, not split by key or model: drop --group-by"
            )
        report = counted_report(store, args.tenant, "month" if args.month else "day", start, end)
    else:
        report = usage_report(store, args.tenant, start, end, args.group_by or "day")
    if args.json:
        print_json(report.model_dump(mode="json"))
        return 0
    rows = [
        (
            r.group,
            r.requests,
            r.errors,
            r.results,
            r.prompt_tokens,
            r.completion_tokens,
            f"{r.duration_ms:.0f}",
            f"{r.cost_usd:.6f}",
        )
        for r in [*report.rows, report.total]
    ]
    print(f"tenant {report.tenant_id}, {_when(report.start)} to {_when(report.end)} UTC, by {report.group_by}")
    heads = (report.group_by, "requests", "errors", "results", "prompt tok", "completion tok", "ms", "est. USD")
    print(table(heads, rows))
    return 0


def add_tenants_arguments(tenants: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    t_sub = tenants.add_subparsers(dest="tenants_command", required=True, metavar="ACTION")
    p = t_sub.add_parser("create", help="create a tenant", parents=[common])
    p.add_argument("tenant_id", metavar="TENANT", help="1-64 letters, digits, '-' or '_'")
    p.add_argument("--name", help="a display name")
    p.add_argument("--daily-requests", type=positive_int, metavar="N", help="requests per UTC day (server default)")
    p.add_argument("--daily-tokens", type=positive_int, metavar="N", help="LLM tokens per UTC day (server default)")
    p.add_argument("--monthly-requests", type=positive_int, metavar="N", help="requests per UTC month (server default)")
    p.add_argument("--monthly-tokens", type=positive_int, metavar="N", help="LLM tokens per UTC month (server default)")
    p.add_argument(
        "--monthly-budget-usd",
        type=_dollars,
        metavar="USD",
        help="estimated spend per UTC month, the cost receipts summed (RAGSTEP_MONTHLY_BUDGET_USD)",
    )
    p.add_argument("--json", action="store_true", help="print the tenant as JSON")
    p.set_defaults(func=cmd_tenants_create)
    p = t_sub.add_parser("list", help="list tenants", parents=[common])
    p.add_argument("--json", action="store_true", help="print the tenants as JSON")
    p.set_defaults(func=cmd_tenants_list)


def add_keys_arguments(keys: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    k_sub = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    scopes = "; ".join(f"{s}: {SCOPE_MEANING[s]}" for s in SCOPES)
    p = k_sub.add_parser("create", help="make an API key (printed once)", parents=[common])
    p.add_argument("--tenant", default=DEFAULT_TENANT, help="the tenant the key acts for (default)")
    p.add_argument("--scope", action="append", required=True, metavar="SCOPE", help=f"repeatable or a,b. {scopes}")
    p.add_argument("--kb", action="append", metavar="KB", help="limit the key to this knowledge base (repeatable)")
    p.add_argument("--expires", metavar="WHEN", help="90d, 12h, 2w, a date (2027-01-31) or an ISO 8601 time")
    p.add_argument("--name", help="what the key is for")
    p.add_argument("--rate", type=float, metavar="R", help="requests per second (RAGSTEP_RATE_LIMIT_PER_SECOND)")
    p.add_argument("--burst", type=positive_int, metavar="N", help="burst size (RAGSTEP_RATE_LIMIT_BURST)")
    p.add_argument("--json", action="store_true", help="print the key's record and the key as JSON")
    p.set_defaults(func=cmd_keys_create)
    p = k_sub.add_parser("list", help="list API keys (prefixes, never the keys)", parents=[common])
    p.add_argument("--tenant", help="only this tenant's keys")
    p.add_argument("--json", action="store_true", help="print the keys' records (never the keys) as JSON")
    p.set_defaults(func=cmd_keys_list)
    p = k_sub.add_parser("revoke", help="revoke an API key by its prefix", parents=[common])
    p.add_argument("prefix", help="the key's prefix (`ragstep keys list`)")
    p.set_defaults(func=cmd_keys_revoke)


def add_usage_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", default=DEFAULT_TENANT, help="whose usage (the default tenant)")
    p.add_argument("--from", dest="start", metavar="WHEN", help="epoch seconds, a date or ISO time (30 days ago)")
    p.add_argument("--to", dest="end", metavar="WHEN", help="epoch seconds, a date or ISO time (now)")
    p.add_argument("--group-by", choices=("day", "month", "key", "model"), help="group the raw records (day)")
    counters = p.add_mutually_exclusive_group()
    counters.add_argument(
        "--month", action="store_true", help="per UTC month, from the counters (kept after raw records expire)"
    )
    counters.add_argument("--daily", action="store_true", help="per UTC day, from the counters")
    p.add_argument("--json", action="store_true", help="print the rows and the total as JSON")
    p.set_defaults(func=cmd_usage)
