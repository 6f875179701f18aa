"""The snapshot's fast paths of issue 33 part 3, each against what it stands in for (the reads of every Workload of
a pass are compared with the reference read in test_snapshot_reference.py; these pin each shortcut alone)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from placement.dispatch.model import HubWorkload

FIELDS: dict[str, Any] = {"namespace": "t", "name": "w", "uid": "u", "created": 0.0, "priority": 0, "queue_name": "q",
                          "cluster_queue": None, "check": None, "check_state": None, "allowed": ()}


def _every_field(**changes: Any) -> dict[str, Any]:
    plain = HubWorkload(**{**FIELDS, **changes})
    return {f.name: getattr(plain, f.name) for f in fields(HubWorkload)}


def test_a_hub_workload_of_every_field_in_order_is_the_one_init_makes() -> None:
    values = _every_field(evictions=3, warnings=("a",))
    made = HubWorkload.of(dict(values))
    plain = HubWorkload(**values)
    assert made == plain and repr(made) == repr(plain) and list(vars(made).items()) == list(vars(plain).items())


def test_a_hub_workload_of_its_fields_in_another_order_keeps_the_fields_order() -> None:
    values = _every_field(priority=7)
    shuffled = dict(reversed(values.items()))
    made = HubWorkload.of(shuffled)
    assert list(vars(made)) == [f.name for f in fields(HubWorkload)]
    assert made == HubWorkload(**values)


def test_a_hub_workload_of_as_many_names_as_fields_but_one_unknown_is_refused() -> None:
    values = _every_field()
    del values["problem"]
    values["prolbem"] = None  # as many names, one of them no field
    with pytest.raises(TypeError, match="prolbem"):
        HubWorkload.of(values)
