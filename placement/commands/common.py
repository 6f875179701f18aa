"""What several commands share: the data flags (catalog, quotas, live data), the plan flags (reservations, --now),
the calibration flags, live data overlaid on the catalog, warnings on stderr, and printing the answer.

Standard library only at import time (``placement --help`` loads this module with the command it describes).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from placement.errors import UsageError, shown

if TYPE_CHECKING:
    import datetime as dt

    from placement.model.catalog import Catalog
    from placement.model.quotas import QuotaTable
    from placement.model.reservations import Reservation


MAX_TIMEOUT_S = 3600.0  # a per-request timeout longer than an hour is a typo; the arithmetic on it stays finite


def seconds(maximum: float = MAX_TIMEOUT_S) -> Callable[[str], float]:
    """An argparse ``type`` for a timeout flag: a number of seconds above 0 and at most ``maximum`` (``nan``,
    ``inf``, ``0``, ``-1`` and ``1e300`` are refused in one line naming the flag)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of seconds, got {shown(text)}") from None
        if not 0 < value <= maximum:  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be more than 0 and at most {maximum:g} seconds, got "
                                             f"{shown(text)}")
        return value

    parse.__name__ = "seconds"
    return parse


def check_chart(path: str | None, inputs: Sequence[str] = ()) -> None:
    """``--chart``'s path and extra, checked before any work (shared by ``report`` and ``plan-batch``)."""
    if path is None:
        return
    from placement.console import require_extra
    from placement.files.outputs import output_path

    output_path(path, "--chart", suffix=".png", inputs=inputs, kind="chart")
    require_extra("charts", ("matplotlib",), "--chart")


def add_data_flags(p: argparse.ArgumentParser, *, live: bool = True) -> None:
    p.add_argument("--catalog", action="append", default=[], metavar="CLOUD=PATH",
                   help="use a SkyPilot-format vms.csv for CLOUD (aws or gcp) instead of the embedded catalog; "
                        "repeatable")
    p.add_argument("--quotas", metavar="PATH", help="quota file: CSV with header cloud,region,quota,limit,usage "
                                                     "or the same rows as a YAML list")
    p.add_argument("--json", action="store_true", help="print one gpufleet.placement/v1 JSON document")
    if live:
        g = p.add_argument_group("live data (needs the 'live' extra: boto3, google-cloud-compute/-billing)")
        mode = g.add_mutually_exclusive_group()
        mode.add_argument("--live", action="store_true",
                          help="query AWS and GCP for current quota, spot prices, offerings and placement scores")
        mode.add_argument("--offline", action="store_true",
                          help="never touch the network: cached or embedded data only")
        g.add_argument("--refresh", action="store_true", help="with --live: ignore the on-disk cache")
        g.add_argument("--aws-profile", metavar="NAME", help="AWS profile (default: the standard credential chain)")
        g.add_argument("--gcp-project", metavar="ID", help="GCP project (default: from Application Default "
                                                           "Credentials / GOOGLE_CLOUD_PROJECT)")
        g.add_argument("--timeout", type=seconds(), default=5.0, metavar="SECONDS",
                       help="per-call timeout for live queries (default 5)")
        g.add_argument("--allow-catalog-fallback", action="store_true",
                       help="with --live: when no cloud has credentials, answer from the catalog (with a warning) "
                            "instead of failing with exit 2")


def add_plan_flags(p: argparse.ArgumentParser) -> None:
    """Flags of plan and plan-batch: capacity already reserved, and the time the plan is made at."""
    p.add_argument("--reservations", metavar="PATH",
                   help="capacity reservations: CSV with header cloud,region,zone,instance_type,count,usd_per_hour,"
                        "ends (count: free nodes of that instance type, not GPUs; usd_per_hour: marginal USD per "
                        "node-hour, 0 if already paid; ends: ISO-8601 or blank)")
    p.add_argument("--now", metavar="TIME", help="plan as of this ISO-8601 time (reservation end dates are compared "
                                                  "with it); default: the current time")


def add_calibration_flags(p: argparse.ArgumentParser) -> None:
    """--calibration / --no-calibration (issue 26): the user's measured spot rates and speeds."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--calibration", metavar="FILE",
                   help="a gpufleet.calibration/v1 file (placement calibrate); default: the newest one calibrate "
                        "wrote in the user data directory")
    g.add_argument("--no-calibration", action="store_true", help="ignore calibration files: model figures only")


def live_data(args: argparse.Namespace, catalog: Catalog, quotas: QuotaTable, accelerators: Sequence[str],
               gpus: int | None, gpus_per_node: int | None = None,
               reservations: bool = False) -> tuple[Catalog, QuotaTable, list[dict[str, Any]]]:
    """Overlay live data (issue: live quota/prices) when --live or --offline asks for it."""
    catalog, quotas, sources, _ = live_overlay(args, catalog, quotas, accelerators, gpus, gpus_per_node, reservations)
    return catalog, quotas, sources


def live_overlay(args: argparse.Namespace, catalog: Catalog, quotas: QuotaTable, accelerators: Sequence[str],
          gpus: int | None, gpus_per_node: int | None,
          reservations: bool) -> tuple[Catalog, QuotaTable, list[dict[str, Any]], tuple[Reservation, ...]]:
    if not (getattr(args, "live", False) or getattr(args, "offline", False)):
        return catalog, quotas, [], ()
    from placement.live import LiveRequest
    from placement.live.runner import fetch_live

    # Placement scores ask for the job's node count on each shape; without a single job, one node.
    request = LiveRequest(accelerators=tuple(accelerators), target_nodes=1, target_gpus=gpus,
                          aws_profile=args.aws_profile,
                          gcp_project=args.gcp_project, refresh=args.refresh, offline=args.offline,
                          timeout_s=args.timeout, progress=not args.json and sys.stderr.isatty(),
                          gpus_per_node=gpus_per_node, reservations=reservations)
    live = fetch_live(request, catalog)
    no_credentials(args, live.sources)
    warn(live.quotas.warnings)
    return live.catalog, quotas.merged(live.quotas), [s.as_dict() for s in live.sources], live.reservations


def no_credentials(args: argparse.Namespace, sources: Sequence[Any]) -> None:
    """A cloud without credentials answers from the catalog: say so on stderr. When no cloud has any, the whole
    answer would be catalog data under a --live flag: refused (exit 2) unless --allow-catalog-fallback, so a
    script never takes catalog prices and unknown quota for live ones."""
    clouds = {s.cloud for s in sources}
    missing = sorted({s.cloud for s in sources if s.status == "no-credentials"})
    if not missing:
        return
    if set(missing) == clouds and not getattr(args, "allow_catalog_fallback", False):
        raise UsageError(f"--live: no credentials for {' or '.join(missing)}, so the answer would be catalog data "
                         "(catalog prices, quota unknown); configure credentials (--aws-profile, `gcloud auth "
                         "application-default login`) or pass --allow-catalog-fallback")
    warn([f"--live: no {cloud} credentials: {cloud} candidates use catalog data (catalog prices, quota unknown)"
           for cloud in missing])


def trust(catalog: Catalog, now: dt.datetime) -> None:
    """Say on stderr when a cloud's catalog is old (over a week; the embedded one over a month), and how old
    (placement.model.trust)."""
    from placement.model.trust import stale_lines

    warn(stale_lines(catalog, now))


def warn(lines: Sequence[str]) -> None:
    """Each line as a warning on stderr, credentials in any URL it holds cut (as every error line's are)."""
    from placement.errors import redact_url

    for line in lines:
        print(f"placement: warning: {redact_url(line)}", file=sys.stderr)


def plan_time(args: argparse.Namespace) -> dt.datetime:
    import datetime as dt

    if getattr(args, "now", None) is None:  # offers has no --now
        return dt.datetime.now(dt.UTC)
    from placement.model.reservations import parse_time

    if not args.now.strip():
        raise UsageError("--now: is empty; give an ISO-8601 time such as 2026-12-01T00:00:00Z, or leave the flag out "
                         "for the current time")
    return parse_time(args.now, "--now", "", blank="")


def load_reserved(args: argparse.Namespace) -> tuple[Reservation, ...]:
    from placement.files.inputs import load_reservations

    return load_reservations(args.reservations)


def emit(doc: dict[str, Any] | None, text: str, as_json: bool) -> None:
    # Strict JSON: NaN / Infinity are not JSON; the core reports an unknown number as null.
    sys.stdout.write((json.dumps(doc, indent=2, allow_nan=False) if as_json else text) + "\n")


def offered_zones(catalog: Catalog, reserved: Sequence[Reservation]) -> set[str]:
    """Every zone a candidate can be in: the catalogs' offers' and the reservations'."""
    return {o.zone for o in catalog.offers} | {r.zone for r in reserved}
