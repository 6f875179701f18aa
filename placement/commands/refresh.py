"""``placement refresh``: rebuild the catalog file from live AWS / GCP answers.

For each asked cloud (default both): every shape of ``shapes.yaml`` in every region the current catalog
lists for that cloud; zones from the live offerings, on-demand prices from the AWS Pricing API and GCP
Cloud Billing, spot prices from AWS spot price history and GCP Billing. Where a live answer is missing
the current catalog's value stays; an answer that cannot be parsed (an HTML page, half a document) is a
failed source, never an empty one.

Where: ``--output``, else the user's data directory (``$GPUFLEET_DATA_DIR`` or
``platformdirs.user_data_dir("gpufleet")``, file ``catalog.json``), never the installed package; plans
then use the newer of that file and the embedded catalog (placement.model.catalog.default_catalog).

Before writing, the whole new catalog is serialised and parsed back with the parser ``plan`` uses, so
refresh never writes what plan would refuse; and a cloud that would lose more than ``MAX_SHRINK`` of its
offers (compared with the catalog in use) is refused unless ``--allow-shrink``. Written atomically (temp
file + ``os.replace``): any failure leaves the old file as it was.

Exit codes: 0 written; 1 nothing written because of the clouds' answers (no cloud answered, the new catalog
does not parse, or it shrank too much); 2 bad input (a flag, an output path that cannot be written).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import sys
from pathlib import Path

from placement.console import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from placement.errors import InputError
from placement.live import LiveRequest
from placement.model.catalog import (
    Catalog,
    Offer,
    catalog_document,
    default_catalog,
    dump_catalog,
    parse_catalog_json,
    price_problems,
    refreshed_catalog_path,
    reject_json_constant,
)
from placement.model.shapes import CLOUDS, shape_book

EXIT_NOT_WRITTEN = EXIT_FAILED
MAX_SHRINK = 0.20  # share of a cloud's offers a refresh may drop without --allow-shrink
ANSWERED = ("ok", "partial")  # source statuses that carry fresh data


# What a refreshed row's prices come from (its ``source`` in the written catalog), per cloud.
ROW_SOURCES = {
    "aws": ("placement refresh {when}: on-demand from the AWS Price List API (pricing GetProducts, Linux, shared "
            "tenancy, per region) and spot from EC2 DescribeSpotPriceHistory (Linux/UNIX, the newest price per zone); "
            "a price the clouds did not answer for is the previous catalog's"),
    "gcp": ("placement refresh {when}: the Cloud Billing Catalog API (Compute Engine service 6F81-5844-456A): vCPUs x "
            "the family's Core SKU + GiB x its Ram SKU + GPUs x the GPU SKU + the bundled Local SSD (A4: GPU-slice "
            "SKUs), on-demand and Spot; a price the billing catalogue did not answer for is the previous catalog's"),
}
LIVE_SOURCES = ("aws-pricing", "aws-spot", "gcp-billing")


def provenance(offers: tuple[Offer, ...], today: str) -> tuple[Offer, ...]:
    """``offers`` with each row's source and date: a row the clouds priced names this refresh (its old flag, about
    the old figures, dropped); the rest keep theirs. Then every row :func:`placement.model.catalog.price_problems` finds
    suspect (spot above on-demand, on-demand far from the machine's median) is flagged with the problem, so the
    written catalog says so where a plan picks it."""
    out = []
    for o in offers:
        if any(part in LIVE_SOURCES for part in o.price_source.split("+")):
            o = dataclasses.replace(o, price_ref=f"refresh-{o.cloud}", price_as_of=today, price_flag=None)
        out.append(o)
    flagged = {id(o): problem for o, problem in price_problems(out)}
    return tuple(dataclasses.replace(o, price_flag=f"placement refresh {today}: {flagged[id(o)]}")
                 if id(o) in flagged else o for o in out)


def describe() -> str:
    """The refresh command's --help description, worked out only when it is printed (the path needs platformdirs)."""
    from placement.model.catalog import DATA_DIR_ENV

    return (f"Write a catalog from live AWS/GCP prices and offerings. Default output: {refreshed_catalog_path()} "
            f"(the user data directory; set {DATA_DIR_ENV} to move it, or pass --output). plan, plan-batch and offers "
            "then use the newer of it and the embedded catalog, and say which.")


def add_arguments(r: argparse.ArgumentParser) -> None:
    r.describe = describe  # type: ignore[attr-defined]  # placement.commands.main's parser calls it for --help
    r.add_argument("--output", "-o", metavar="PATH", help="where to write (default: catalog.json in the user's data "
                                                           "directory, which plan then prefers when newer)")
    r.add_argument("--allow-shrink", action="store_true",
                   help="write even if a cloud lost more than 20%% of its offers (refused by default)")
    r.add_argument("--cloud", action="append", choices=("aws", "gcp"), help="only this cloud (repeatable)")
    r.add_argument("--aws-profile", metavar="NAME", help="AWS profile (default: the standard credential chain)")
    r.add_argument("--gcp-project", metavar="ID", help="GCP project (default: from Application Default "
                                                       "Credentials / GOOGLE_CLOUD_PROJECT)")
    from placement.commands.common import seconds

    r.add_argument("--timeout", type=seconds(), default=10.0, metavar="SECONDS",
                   help="per-call timeout for the live queries (default 10, at most 3600)")


def default_output() -> Path:
    """The user's data directory's catalog file (see placement.model.catalog.refreshed_catalog_path)."""
    return refreshed_catalog_path()


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    print(f"placement refresh: error: {message}", file=sys.stderr)
    return code


def shrinkage(old: Catalog, new: Catalog, clouds: set[str]) -> dict[str, tuple[int, int]]:
    """Clouds of ``clouds`` that lost more than ``MAX_SHRINK`` of their offers: cloud -> (old, new) counts."""
    before, after = old.offers_per_cloud, new.offers_per_cloud
    return {c: (before.get(c, 0), after.get(c, 0)) for c in sorted(clouds)
            if before.get(c, 0) and after.get(c, 0) < (1 - MAX_SHRINK) * before[c]}


def _output(args: argparse.Namespace) -> Path | int:
    """Where to write, checked before any cloud is asked: ``--output`` by the rule every output path follows
    (:func:`placement.files.outputs.output_path`: a file in a folder that exists, replacing only a catalog),
    else the user data directory's catalog file."""
    if getattr(args, "output", None):
        from placement.errors import UsageError
        from placement.files.outputs import output_path
        from placement.model.catalog import CATALOG_SCHEMA

        try:
            return output_path(args.output, "--output", replaceable=lambda head: CATALOG_SCHEMA.encode() in head,
                               kind="catalog")
        except UsageError as exc:
            return _fail(str(exc))
    out = default_output()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return _fail(f"cannot create the data directory {out.parent} ({exc.__class__.__name__}); "
                     "pass --output PATH or set GPUFLEET_DATA_DIR")
    return out


def run_refresh(args: argparse.Namespace) -> int:
    from placement.live.runner import fetch

    try:
        timeout = float(getattr(args, "timeout", 10.0) or 0)
    except (TypeError, ValueError):
        timeout = 0.0
    if not (timeout > 0 and math.isfinite(timeout)):
        return _fail(f"--timeout: must be a positive number of seconds, got {args.timeout!r}")
    clouds = tuple(dict.fromkeys(getattr(args, "cloud", None) or CLOUDS))
    out = _output(args)
    if isinstance(out, int):
        return out

    base: Catalog = default_catalog()
    accels = tuple(sorted(shape_book().accelerators()))
    request = LiveRequest(accelerators=accels, target_nodes=1, aws_profile=getattr(args, "aws_profile", None),
                          gcp_project=getattr(args, "gcp_project", None), refresh=True, offline=False,
                          timeout_s=timeout, progress=sys.stderr.isatty(), clouds=clouds)
    live = fetch(request, base, pricing=True, new_pairs=True)
    answered = {s.cloud for s in live.sources if s.status in ANSWERED}
    for s in live.sources:
        if s.status not in ("ok", "cached"):
            print(f"placement refresh: {s.cloud} {s.service} {s.region or '-'}: {s.status} {s.detail}".rstrip(),
                  file=sys.stderr)
    if not answered:
        return _fail("no cloud answered; catalog left unchanged", EXIT_NOT_WRITTEN)
    # Clouds that did not answer (or were not asked) keep their current offers unchanged.
    keep = tuple(o for o in base.offers if o.cloud not in answered)
    today = dt.date.today().isoformat()
    fresh = provenance(tuple(o for o in live.catalog.offers if o.cloud in answered), today)
    catalog = Catalog(offers=keep + fresh, as_of=today, source="refresh")
    shrunk = shrinkage(base, catalog, answered)
    if shrunk and not getattr(args, "allow_shrink", False):
        lost = ", ".join(f"{c} {n} of {o} offers" for c, (o, n) in shrunk.items())
        return _fail(f"the new catalog would keep only {lost} (more than {MAX_SHRINK:.0%} fewer); catalog left "
                     "unchanged - check the sources above, or pass --allow-shrink if the clouds really dropped them",
                     EXIT_NOT_WRITTEN)
    stamp = f"{dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%MZ}"
    notes = [f"placement refresh {stamp}: live "
             + ", ".join(sorted(answered)) + " (offerings, spot prices, on-demand prices)"]
    notes += [f"kept from the previous catalog ({base.as_of}): {c}" for c in CLOUDS if c not in answered]
    refs = {k: v for k, v in base.row_sources.items() if any(o.price_ref == k for o in catalog.offers)}
    refs.update({f"refresh-{c}": ROW_SOURCES[c].format(when=stamp) for c in sorted(answered)})
    doc = catalog_document(catalog, as_of=catalog.as_of, sources=notes, row_sources=refs)
    try:
        text = dump_catalog(doc)
        parse_catalog_json(json.loads(text, parse_constant=reject_json_constant), source="refresh", path=str(out))
    except (InputError, ValueError, TypeError, KeyError) as exc:
        return _fail(f"the new catalog does not parse ({exc}); catalog left unchanged", EXIT_NOT_WRITTEN)
    try:
        from placement.files.safe import write_atomic

        write_atomic(out, text.encode("utf-8"))
    except OSError as exc:
        return _fail(f"--output: cannot write {out} ({exc.__class__.__name__}: {exc.strerror or exc})")
    print(f"wrote {out}: {len(doc['offers'])} offers, as of {catalog.as_of} (live: {', '.join(sorted(answered))})",
          file=sys.stderr)
    return EXIT_OK
