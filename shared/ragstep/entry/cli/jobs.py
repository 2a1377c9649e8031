"""``ragstep jobs prune``: remove the finished ingestion jobs older than a retention (HTTP uploads' job records).

``ragstep serve`` does the same on its own (``RAGSTEP_JOB_RETENTION_DAYS``, on start-up and at most hourly after a
job); this command is for a data dir no server runs on, or to prune now, with another retention.
"""

from __future__ import annotations

import argparse

from ragstep.entry.cli.common import context_of, print_json


def retention_days(text: str) -> float:
    """An argparse type: days, 0 or more (fractions allowed: 0.5 = 12 hours)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} days: give 0 or more (0 removes every finished job)")
    return value


def cmd_jobs_prune(args: argparse.Namespace) -> int:
    from ragstep.app.jobs import known_tenants, prune_jobs

    clients = context_of(args).clients
    days = clients.settings.job_retention_days if args.older_than is None else args.older_than
    tenants = known_tenants(clients) if args.tenant is None else [args.tenant]
    removed = {tenant: prune_jobs(clients.context(tenant), days * 86400.0) for tenant in tenants}
    if args.json:
        print_json({"older_than_days": days, "removed": removed})
    else:
        print(f"removed {sum(removed.values())} ingestion jobs finished more than {days:g} days ago")
    return 0


def add_jobs_arguments(jobs: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    j_sub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    p = j_sub.add_parser("prune", help="remove finished jobs older than a retention", parents=[common])
    p.add_argument(
        "--older-than",
        type=retention_days,
        metavar="DAYS",
        help="finished more than DAYS ago (default RAGSTEP_JOB_RETENTION_DAYS, 30)",
    )
    p.add_argument("--tenant", help="only this tenant's jobs (default: every tenant of the data dir)")
    p.add_argument("--json", action="store_true", help="print {older_than_days, removed: {tenant: count}}")
    p.set_defaults(func=cmd_jobs_prune)
