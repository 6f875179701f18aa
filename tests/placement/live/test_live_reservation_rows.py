"""Live reservation rows as a cached file may hold them (issue 21): a bad ``ends``, a missing ``kind`` or a numeric
zone is refused by name, row by row, before the overlay reads it; the rest is used and nothing raises."""

from __future__ import annotations

from typing import Any

import pytest

from placement.live.checks import check_answer
from placement.live.overlay import LiveData, reservations
from placement.model.catalog import Catalog, Offer
from placement.model.shapes import shape_book


def _catalog() -> Catalog:
    p5 = shape_book().get("p5.48xlarge")
    assert p5 is not None
    return Catalog(offers=(Offer("aws", "us-east-1", "use1-az4", p5, 55.0, 20.0),), as_of="2026-11-01", source="t")


GOOD = {"id": "ok", "instance_type": "p5.48xlarge", "zone_id": "use1-az4", "zone": "us-east-1a", "count": 2,
        "ends": "2026-12-01T00:00:00Z", "kind": "odcr", "committed": False}


@pytest.mark.parametrize("bad, needle", [
    ({"ends": "soon"}, "ends 'soon'"), ({"ends": 1764547200}, "ends 1764547200"),
    ({"kind": None}, "kind None"), ({"kind": "spot-block"}, "kind 'spot-block'"),
    ({"zone": 5, "zone_id": None}, "zone 5"), ({"zone_id": 7}, "zone_id 7"),
])
def test_a_bad_row_is_refused_by_name_and_the_others_are_used(bad: dict[str, Any], needle: str) -> None:
    row = {**GOOD, "id": "bad", **bad}
    if bad.get("kind") is None and "kind" in bad:
        del row["kind"]
    checked = check_answer("reservations", [row, GOOD])
    assert [r["id"] for r in checked.data] == ["ok"]
    (note,) = checked.notes
    assert "refused 1 reservations" in note and needle in note
    got = reservations(LiveData(accelerators={"H100"}, aws_reservations={"us-east-1": checked.data}), _catalog())
    assert [r.id for r in got] == ["ok"]


def test_cached_reservation_rows_with_bad_fields_are_refused_not_a_traceback(live_env: dict[str, Any]) -> None:
    import io
    import json
    from contextlib import redirect_stderr, redirect_stdout

    from placement.commands.main import main

    def plan() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["plan", live_env["job"], "--live", "--json", *live_env["args"]])
        return code, out.getvalue(), err.getvalue()

    assert plan()[0] == 0
    files = [f for f in sorted((live_env["tmp"] / "cache" / "live-v1").glob("*.json"))
             if json.loads(json.loads(f.read_text())["key"])[2] == "reservations"]
    assert files
    rows = [{**GOOD, "id": "bad-ends", "ends": "soon"}, {k: v for k, v in GOOD.items() if k != "kind"} | {"id": "no"},
            {**GOOD, "id": "num-zone", "zone": 5, "zone_id": None}]
    for f in files:
        doc = json.loads(f.read_text())
        f.write_text(json.dumps({**doc, "data": rows}))
    code, out, err = plan()
    assert code == 0 and "Traceback" not in err
    json.loads(out)
