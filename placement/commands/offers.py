"""``placement offers --accelerator GPU``: the catalog's offers of one accelerator, as a table or JSON."""

from __future__ import annotations

import argparse

from placement.commands.common import add_data_flags, emit, live_data, plan_time, trust
from placement.console import EXIT_NOTHING_FEASIBLE, EXIT_OK, output_width
from placement.errors import UsageError, shown


def add_arguments(o: argparse.ArgumentParser) -> None:
    o.add_argument("--accelerator", required=True, help="GPU name, e.g. H100")
    o.add_argument("--cloud", choices=("aws", "gcp"), help="only this cloud")
    o.add_argument("--region", help="only this region")
    o.add_argument("--capacity", choices=("spot", "on-demand", "any"), default="any",
                   help="only offers with this price (default any)")
    add_data_flags(o)


def run_offers(args: argparse.Namespace) -> int:
    from placement.commands.render import catalog_info, offer_doc, offers_text
    from placement.files.inputs import load_catalog, load_quotas
    from placement.model.shapes import shape_book

    book = shape_book()
    accel = book.canonical_accelerator(args.accelerator)
    if accel not in book.accelerators():
        raise UsageError(f"--accelerator: unknown accelerator {shown(args.accelerator)}; known: "
                         + ", ".join(sorted(book.accelerators())))
    catalog = load_catalog(args.catalog)
    catalog, _, sources = live_data(args, catalog, load_quotas(args.quotas), [accel], None)
    offers = [o for o in catalog.offers if o.shape.accelerator == accel
              and (args.cloud is None or o.cloud == args.cloud)
              and (args.region is None or o.region == args.region)
              and (args.capacity != "spot" or o.spot_price is not None)
              and (args.capacity != "on-demand" or o.price is not None)]
    offers.sort(key=lambda o: (o.cloud, o.region, o.zone, o.instance_type))
    now = plan_time(args)
    trust(catalog, now)
    doc = {"schema": "gpufleet.placement/v1", "kind": "offers", "accelerator": accel,
           "catalog": catalog_info(catalog, now), "sources": sources,
           "offers": [offer_doc(o) for o in offers]}
    emit(doc, "" if args.json else offers_text(offers, output_width()), args.json)
    return EXIT_OK if offers else EXIT_NOTHING_FEASIBLE
