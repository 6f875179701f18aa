"""``placement refresh``: rebuild the embedded catalog file from live AWS / GCP answers.

For each asked cloud (default both): every shape of ``shapes.yaml`` in every region the current catalog
lists for that cloud; zones from the live offerings, on-demand prices from the AWS Pricing API and GCP
Cloud Billing, spot prices from AWS spot price history and GCP Billing. Where a live answer is missing
the current catalog's value stays. Written atomically (temp file + ``os.replace``): a failure leaves the
old file as it was. Exit 0 written, 1 no cloud answered, 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path

from placement.catalog import Catalog, catalog_document, dump_catalog, embedded_catalog
from placement.live import LiveRequest
from placement.shapes import CLOUDS, shape_book

EXIT_OK, EXIT_NO_ANSWER, EXIT_BAD_INPUT = 0, 1, 2


def default_output() -> Path:
    return Path(str(resources.files("placement.data").joinpath("catalog.json")))


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same directory and ``os.replace``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fail(message: str) -> int:
    print(f"placement refresh: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run_refresh(args: argparse.Namespace) -> int:
    from placement.live.runner import fetch

    timeout = float(getattr(args, "timeout", 10.0) or 0)
    if not (timeout > 0 and math.isfinite(timeout)):
        return _fail(f"--timeout: must be a positive number of seconds, got {args.timeout!r}")
    clouds = tuple(dict.fromkeys(getattr(args, "cloud", None) or CLOUDS))
    out = Path(args.output) if getattr(args, "output", None) else default_output()
    if out.is_dir():
        return _fail(f"--output: {out} is a directory; give a file path")
    if not out.parent.is_dir():
        return _fail(f"--output: directory {out.parent} does not exist")

    base: Catalog = embedded_catalog()
    accels = tuple(sorted(shape_book().accelerators()))
    request = LiveRequest(accelerators=accels, target_nodes=1, aws_profile=getattr(args, "aws_profile", None),
                          gcp_project=getattr(args, "gcp_project", None), refresh=True, offline=False,
                          timeout_s=timeout, progress=sys.stderr.isatty(), clouds=clouds)
    live = fetch(request, base, pricing=True, new_pairs=True)
    answered = {s.cloud for s in live.sources if s.status == "ok"}
    for s in live.sources:
        if s.status != "ok":
            print(f"placement refresh: {s.cloud} {s.service} {s.region or '-'}: {s.status} {s.detail}".rstrip(),
                  file=sys.stderr)
    if not answered:
        print("placement refresh: error: no cloud answered; catalog left unchanged", file=sys.stderr)
        return EXIT_NO_ANSWER
    # Clouds that did not answer (or were not asked) keep their current offers unchanged.
    keep = tuple(o for o in base.offers if o.cloud not in answered)
    fresh = tuple(o for o in live.catalog.offers if o.cloud in answered)
    catalog = Catalog(offers=keep + fresh, as_of=dt.date.today().isoformat(), source="refresh")
    notes = [f"placement refresh {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%MZ}: live "
             + ", ".join(sorted(answered)) + " (offerings, spot prices, on-demand prices)"]
    notes += [f"kept from the previous catalog ({base.as_of}): {c}" for c in CLOUDS if c not in answered]
    doc = catalog_document(catalog, as_of=catalog.as_of, sources=notes)
    try:
        write_atomic(out, dump_catalog(doc))
    except OSError as exc:
        return _fail(f"--output: cannot write {out} ({exc.__class__.__name__}: {exc.strerror or exc})")
    print(f"wrote {out}: {len(doc['offers'])} offers, as of {catalog.as_of} (live: {', '.join(sorted(answered))})",
          file=sys.stderr)
    return EXIT_OK
