"""Text output fits the terminal: tables within the width, notes and "why" wrapped, no trailing spaces; and
when nothing runs, the closest reasons are named."""

from __future__ import annotations

from factories import job, offer

from placement.commands.render import fit_table, plan_text, table
from placement.model.catalog import Catalog
from placement.model.quotas import QuotaTable
from placement.plan.job import plan

HEADERS = ("name", "price", "notes")
ROWS = [["alpha", "1.00", "a rather long note that needs wrapping when the table is narrow"],
        ["b", "22.50", ""]]


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_table_lines_have_no_trailing_spaces():
    assert all(line == line.rstrip() for line in lines(table(HEADERS, ROWS, right={1})))


def test_fit_table_without_width_is_the_plain_table():
    assert fit_table(HEADERS, ROWS, {1}) == table(HEADERS, ROWS, {1})


def test_fit_table_moves_the_last_column_under_its_row_and_wraps_it():
    out = lines(fit_table(HEADERS, ROWS, {1}, width=30))
    assert max(map(len, out)) <= 30
    assert out[0].split() == ["name", "price"]
    assert out[2].split() == ["alpha", "1.00"]
    assert out[3].startswith("    a rather long")
    assert " ".join(x.strip() for x in out[3:-1]) == ROWS[0][2]
    assert out[-1].split() == ["b", "22.50"]
    assert all(line == line.rstrip() for line in out)


def test_fit_table_hides_droppable_columns_and_says_which():
    wide = [["x" * 20, "y" * 20, "z" * 20, "n"]]
    out = lines(fit_table(("a", "b", "c", "notes"), wide, width=45, drop=("b",)))
    assert "y" * 20 not in "\n".join(out)
    assert "(hidden to fit 45 columns: b;" in "\n".join(out)
    assert max(map(len, out)) <= 45


def test_fit_table_keeps_the_last_column_when_it_is_data():
    out = fit_table(("a", "b", "spot"), [["x" * 30, "y" * 30, "1.00"]], width=50, drop=("b",), wrap_last=False)
    assert lines(out)[2].split() == ["x" * 30, "1.00"]


def _plan(j, offers):
    catalog = Catalog(offers=tuple(offers), source="test", as_of="2026-11-01")
    return plan(j, catalog.offers, QuotaTable({})), catalog


def test_plan_text_fits_80_columns_and_wraps_why():
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az4", price=98.32, spot=30.0),
              offer("p5.48xlarge", "us-west-2", "usw2-az1", price=98.32, spot=35.0),
              offer("a3-highgpu-8g", "us-central1", "us-central1-a", price=88.0, spot=30.0)]
    p, catalog = _plan(job(gpus=16), offers)
    text = plan_text(p, catalog, top=5, all_candidates=False, width=80)
    assert max(map(len, lines(text))) <= 80
    assert all(line == line.rstrip() for line in lines(text))
    why = [line for line in lines(text) if line.startswith("why: ")]
    assert why and text.index("why: ") < len(text) - 80  # the "why" goes on over more than one line
    unlimited = plan_text(p, catalog, top=5, all_candidates=False)
    assert max(map(len, lines(unlimited))) > 80


def test_no_runnable_candidate_names_the_missing_accelerator_and_the_exclusions():
    offers = [offer("g6.xlarge", "us-east-1", "use1-az4", price=0.8, spot=0.3)]
    p, catalog = _plan(job(accelerator="L4", gpus=1, clouds={"allow": ["gcp"]}), offers)
    text = plan_text(p, catalog, top=5, all_candidates=False)
    assert "(no runnable candidate): closest reasons:" in text
    assert "no offer of L4 on gcp in the catalog" in text
    assert "cloud aws not in clouds.allow (2 candidates)" in text


def test_no_runnable_candidate_names_the_price_cap():
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az4", price=98.32, spot=None)]
    p, catalog = _plan(job(gpus=8, max_usd_per_hour=10), offers)
    text = plan_text(p, catalog, top=5, all_candidates=False)
    reasons = text.split("closest reasons:")[1]
    assert "max_usd_per_hour" in reasons and "no offer" not in reasons


def test_plan_json_lists_the_closest_reasons_only_when_nothing_runs():
    from placement.commands.render import plan_doc

    offers = [offer("g6.xlarge", "us-east-1", "use1-az4", price=0.8, spot=0.3)]
    p, catalog = _plan(job(accelerator="L4", gpus=1, clouds={"allow": ["gcp"]}), offers)
    doc = plan_doc(p, catalog, top=5, all_candidates=False)
    assert doc["chosen"] is None and "no offer of L4 on gcp in the catalog" in doc["closest_reasons"]
    p, catalog = _plan(job(accelerator="L4", gpus=1), offers)
    assert plan_doc(p, catalog, top=5, all_candidates=False)["closest_reasons"] == []


def test_at_80_columns_a_plan_keeps_region_and_total_and_hides_zone_ids_first():
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az4", price=98.32, spot=30.0),
              offer("a3-highgpu-8g", "us-central1", "us-central1-a", price=88.0, spot=30.0)]
    p, catalog = _plan(job(gpus=16), offers)
    text = plan_text(p, catalog, top=5, all_candidates=False, width=80)
    header = lines(text)[[i for i, x in enumerate(lines(text)) if x.startswith("#  ")][0]].split()
    assert "region" in header and "total" in header and "zone" not in header
    # the bill's other lines (issue 27) are hidden before the zone: the total counts them
    assert "(hidden to fit 80 columns: ckpt every, nat $, ckpt store $, ckpt req $, zone" in text


def test_a_note_every_row_carries_is_said_once_above_the_table():
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az4", price=98.32, spot=30.0),
              offer("p5.48xlarge", "us-west-2", "usw2-az1", price=98.32, spot=35.0)]
    p, catalog = _plan(job(gpus=16, capacity="spot"), offers)
    text = plan_text(p, catalog, top=5, all_candidates=False)
    assert text.count("quota unknown") == 2  # once above the table, once in "why"
    assert "every row: quota unknown, +" in text and "for interruptions" in text.split("\n#")[0]
    one, _ = _plan(job(gpus=16, capacity="spot"), offers[:1])
    assert "every row" not in plan_text(one, catalog, top=5, all_candidates=False)


def test_batch_text_lists_moved_jobs_and_what_bound_the_unplaced():
    from factories import quotas

    from placement.commands.render import batch_doc, batch_text
    from placement.plan.batch import solve

    east = offer("p5.48xlarge", "us-east-1", "use1-az4", price=50)
    q = quotas(("aws", "us-east-1", "L-417A185B", 4 * 192, 0))
    jobs = [job(name="tune", gpus=16, capacity="on-demand", priority="low"),
            job(name="pretrain", gpus=32, capacity="on-demand")]
    result = solve(jobs, [east], q)
    catalog = Catalog(offers=(east,), source="test", as_of="2026-11-01")
    text = batch_text(result, catalog, width=80)
    assert max(map(len, lines(text))) <= 80
    assert "priority" in lines(text)[0] and "region" in lines(text)[0]
    assert "placed differently from planning each job alone (1):" in text
    assert "taken by pretrain" in text
    doc = batch_doc(result, catalog)
    tune = doc["jobs"][0]
    assert tune["moved"] and tune["priority"] == 100 and tune["alone"]["region"] == "us-east-1"
    assert tune["binding"] == [{"cloud": "aws", "region": "us-east-1", "quota": "L-417A185B", "unit": "vcpu",
                                "needed": 384, "headroom": 768.0, "used": 768.0, "taken_by": ["pretrain"]}]
