"""Sweep: every example stack with values broken one to three at a time parses or fails with a config error.

The parser (and the pure planning each cloud runs before its first resource) must either accept a mutated
stack or raise :class:`ConfigError` with one line naming a ``gpufleet:`` key. Any other exception is a
traceback in ``pulumi up``. The exhaustive part breaks every value of every stack with every value in
:data:`BROKEN`; the hypothesis part combines several mutations, including random text and numbers.
Figures: ``scripts/bench_config_sweep.py`` prints the number of cases and the time they take.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.config import ConfigError, StackConfig, parse

REPO = Path(__file__).resolve().parents[2]
STACK_FILES = sorted((REPO / "stacks").glob("Pulumi.*.yaml"))

DELETE = object()  # a mutation that removes the key instead of replacing its value
# What a hand-edited YAML file or `pulumi config set --path` can put where a value belongs (or leave out).
BROKEN: tuple[Any, ...] = (
    math.inf, -math.inf, math.nan, 10**400, 1e300, -1, -(2**63), 0, 2**31, True, False, None, "", " ", "x\n",
    "9" * 5000, ["a"], ["a", "b"], [], {"a": 1}, {}, {1: "x"}, [{"a": [1]}], "inf", "-1", "10.0.0.0/8",
    DELETE,
)
Path_ = tuple[str | int, ...]


def stack_raw(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    return {k.split(":", 1)[1]: v for k, v in doc["config"].items() if k.startswith("gpufleet:")}


STACKS = {p.name.removeprefix("Pulumi.").removesuffix(".yaml"): stack_raw(p) for p in STACK_FILES}
# The example files leave optional keys out; these variants set them, so the sweep breaks those too.
_FULL = {
    "aws-use1-p5": {
        "nodePools": [*STACKS["aws-use1-p5"]["nodePools"],
                      {"name": "block", "instanceType": "p5.48xlarge", "capacity": "CAPACITY_BLOCK",
                       "reservation": "cr-0123456789abcdef0", "minNodes": 2, "desiredNodes": 2, "maxNodes": 2,
                       "zone": "use1-az6"}],
        "network": {"vpcCidr": "10.0.0.0/16", "azCount": 3, "servicesCidr": "172.20.0.0/16"},
        "cluster": {"kubernetesVersion": "1.35", "publicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"],
                    "adminPrincipals": ["arn:aws:iam::123456789012:role/Platform"], "hubCidrs": ["10.200.0.0/20"]},
        "kueue": {"version": "0.19.2", "cohort": "ml.gpufleet", "teams": ["team-a", "team-b"],
                  "flavorOrder": ["spot", "on-demand"]},
    },
    "gcp-euw4-a3high": {
        "cluster": {"releaseChannel": "STABLE", "gkeVersion": "1.33.5-gke.1080000", "deletionProtection": False,
                    "publicAccess": False},
        "checkpoint": {"prefix": "ckpt", "noncurrentVersionDays": 30, "softDeleteDays": 14,
                       "kmsKey": "projects/p/locations/europe-west4/keyRings/r/cryptoKeys/k",
                       "filesystem": {"kind": "lustre", "capacityGb": 18000, "throughputMbpsPerTib": 500}},
    },
    "hub": {
        "hub": {**STACKS["hub"]["hub"], "dispatcher": "External", "dispatch": {
            "image": "registry.example.com/gpufleet/placement:0.1.0", "replicas": 2, "admissionDeadlineSeconds": 300,
            "waitUsdPerGpuHour": 2.0, "live": True,
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/d"}}},
    },
}
STACKS.update({f"{name}+full": {**STACKS[name], **extra} for name, extra in _FULL.items()})


def value_paths(node: Any, path: Path_ = ()) -> Iterator[Path_]:
    """Every key path in ``node``: mappings, lists and the scalars in them."""
    if path:
        yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from value_paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from value_paths(v, (*path, i))


PATHS = {name: list(value_paths(raw)) for name, raw in STACKS.items()}


def mutated(raw: dict[str, Any], path: Path_, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    node: Any = out
    for part in path[:-1]:
        node = node[part]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = copy.deepcopy(value)
    return out


def plan(cfg: StackConfig) -> None:
    """What each cloud's program computes from the config before registering its first resource."""
    if cfg.role == "hub":
        return
    if cfg.cloud == "aws":
        from infra.aws.layout import plan_subnets

        plan_subnets(cfg)
    else:
        from infra.gcp.plan import check_gcp_config

        check_gcp_config(cfg)


def parses_or_names_a_key(raw: dict[str, Any], stack: str) -> bool:
    """True when ``raw`` is accepted (and planned); False when refused with a proper config error."""
    try:
        plan(parse(raw, stack=stack.replace("+", "-")))
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("gpufleet:") and "\n" not in message and len(message) < 600, message
        return False
    return True


def exhaustive_cases() -> Iterator[tuple[str, Path_, Any]]:
    for name, paths in PATHS.items():
        for path in paths:
            for value in BROKEN:
                yield name, path, value


def test_every_value_of_every_stack_broken_every_way() -> None:
    accepted = refused = 0
    for name, path, value in exhaustive_cases():
        try:
            ok = parses_or_names_a_key(mutated(STACKS[name], path, value), name)
        except Exception as exc:  # noqa: BLE001 - the point: name the case that escaped
            pytest.fail(f"{name} {'.'.join(map(str, path))} = {value!r:.60}: {type(exc).__name__}: {exc!s:.200}")
        accepted += ok
        refused += not ok
        if ok and must_refuse(leaf(STACKS[name], path), value):
            pytest.fail(f"{name} {'.'.join(map(str, path))} = {value!r:.60} was accepted")
    # Both outcomes occur: the mutations reach the checks, and some (e.g. 0 minNodes) are valid.
    assert accepted > 0 and refused > 10 * accepted


def leaf(raw: dict[str, Any], path: Path_) -> Any:
    node: Any = raw
    for part in path:
        node = node[part]
    return node


def must_refuse(original: Any, value: Any) -> bool:
    """Replacements no key may accept, whatever it means: a list or mapping where a string or number was, and a
    non-finite, boolean or out-of-range value where a number was. (Every key is read through a typed accessor;
    one read with ``str()`` or ``int()`` fails here as soon as an example stack sets it.)"""
    number = isinstance(original, (int, float)) and not isinstance(original, bool)
    if (isinstance(original, str) or number) and isinstance(value, (list, dict)):
        return True
    if number:
        return isinstance(value, bool) or (isinstance(value, (int, float)) and not -(2**31) <= value < 2**31) \
            or (isinstance(value, float) and math.isnan(value))
    return False


@st.composite
def broken_stacks(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(STACKS)))
    raw = STACKS[name]
    values = st.one_of(
        st.sampled_from(BROKEN),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=300),
        st.lists(st.text(max_size=5), max_size=3),
        st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    )
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = list(value_paths(raw))
        raw = mutated(raw, draw(st.sampled_from(paths)), draw(values))
    return name, raw


MAX_EXAMPLES = 400


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_stacks())
def test_random_mutations_parse_or_name_a_key(case: tuple[str, dict[str, Any]]) -> None:
    name, raw = case
    parses_or_names_a_key(raw, name)


@pytest.mark.parametrize("name", sorted(STACKS))
def test_the_unbroken_stacks_parse_and_plan(name: str) -> None:
    assert parses_or_names_a_key(STACKS[name], name)
