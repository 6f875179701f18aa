"""Offline infra preview: what each stack creates, its GPU capacity, what it costs, and the diff against a git ref.

``scripts/preview`` calls :func:`main`. No cloud credentials and no Pulumi CLI: every stack program runs under
``infra.mockrun.run_stack`` and is priced from the embedded catalog (``placement/data/catalog.json``). Spot pools
are priced at the spot price; on-demand, capacity-block and reservation pools at the on-demand price. Prices are
USD per node-hour; a month is 730 hours. Only GPU nodes are priced (control planes, NAT, storage are not in the
catalog).

``--base REF`` checks REF out in a temporary ``git worktree`` and runs REF's own ``scripts/preview --format json``
there in a subprocess, so the baseline uses REF's code, shapes, catalog and stack files.

Exit codes: 0 clean, 1 a mandatory policy is violated, 2 bad input (unknown stack, bad ref, a stack that fails).

Why one module: it is one command (``scripts/preview``): discovery, pricing, the base ref's run and the diff feed
one text or Markdown report, and their helpers are private to it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.replace import replacements

SCHEMA = "gpufleet.preview/v1"
HOURS_PER_MONTH = 730
ROOT = Path(__file__).resolve().parents[1]
STACK_GLOB = "Pulumi.*.yaml"
# Spot is the only capacity priced at the spot price; reservations and capacity blocks bill like on-demand.
SPOT_CAPACITIES = ("SPOT",)


class PreviewError(Exception):
    """Bad input: printed as one line, exit code 2."""


# --------------------------------------------------------------------------------------------- stacks


def discover_stacks(root: Path) -> dict[str, Path]:
    """``{stack name: stack file}`` for every ``stacks/Pulumi.<stack>.yaml`` under ``root``, sorted by name."""
    found = {}
    for path in sorted((root / "stacks").glob(STACK_GLOB)):
        found[path.name.removeprefix("Pulumi.").removesuffix(".yaml")] = path
    return found


def select_stacks(root: Path, names: Sequence[str]) -> dict[str, Path]:
    """The stacks named on the command line (all when none); raises :class:`PreviewError` for an unknown one."""
    available = discover_stacks(root)
    if not names:
        return available
    unknown = [n for n in names if n not in available]
    if unknown:
        known = ", ".join(available) or "none"
        raise PreviewError(f"unknown stack {unknown[0]!r}: no stacks/Pulumi.{unknown[0]}.yaml (known: {known})")
    return {n: available[n] for n in dict.fromkeys(names)}


def _raw_config(path: Path) -> dict[str, Any]:
    """The ``gpufleet:`` keys of a stack file, without the prefix. The file is read by the CLI's bounded YAML
    loader (a size cap, nesting and alias limits, duplicate keys refused); one that is not a mapping with a
    ``config:`` mapping is a :class:`PreviewError` naming the file, which fails that stack alone (exit 2)."""
    from placement.errors import InputError, UsageError
    from placement.files.readers import load_yaml

    where = f"{path.parent.name}/{path.name}"
    try:
        doc = load_yaml(str(path), where)
    except (UsageError, InputError) as exc:
        raise PreviewError(str(exc)) from None
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise PreviewError(f"{where}: must be a YAML mapping with a config: mapping of gpufleet:* keys, got "
                           f"{_kind(doc)}; fix the stack file")
    config = doc.get("config") or {}
    if not isinstance(config, Mapping):
        raise PreviewError(f"{where}: config: must be a mapping of gpufleet:* keys, got {_kind(config)}; fix the "
                           "stack file")
    return {k.split(":", 1)[1]: v for k, v in config.items() if isinstance(k, str) and k.startswith("gpufleet:")}


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__)


# --------------------------------------------------------------------------------------------- pricing


@dataclass(frozen=True)
class Quote:
    """The price of one node of a pool: USD per node-hour, or None when the catalog has no such offer.

    ``source`` is ``zone`` (the pool's own zone), ``region`` (the region's cheapest zone for the shape, used when
    the catalog lacks the pool's zone) or ``none``; ``zone`` is the catalog zone the price came from.
    """

    usd_per_node_hour: float | None
    source: str
    zone: str | None
    priced_as: str


def quote(catalog: Any, cloud: str, region: str, zone: str | None, instance_type: str, capacity_type: str) -> Quote:
    """Price one node of ``instance_type`` from ``catalog`` (a ``placement.model.catalog.Catalog``)."""
    spot = capacity_type.upper() in SPOT_CAPACITIES
    priced_as = "spot" if spot else "on-demand"
    offers = [o for o in catalog.offers
              if o.cloud == cloud and o.region == region and o.instance_type == instance_type]

    def price(offer: Any) -> float | None:
        return offer.spot_price if spot else offer.price

    for offer in offers:
        if offer.zone == zone and price(offer) is not None:
            return Quote(price(offer), "zone", offer.zone, priced_as)
    priced = [o for o in offers if price(o) is not None]
    if priced:
        cheapest = min(priced, key=lambda o: (price(o), o.zone))
        return Quote(price(cheapest), "region", cheapest.zone, priced_as)
    return Quote(None, "none", None, priced_as)


def _money(hourly: float) -> dict[str, float]:
    return {"hour": round(hourly, 4), "month": round(hourly * HOURS_PER_MONTH, 2)}


def price_pools(pools: Sequence[Mapping[str, Any]], cloud: str, region: str, catalog: Any) -> list[dict[str, Any]]:
    """Each ``nodePools`` output row with its quote and cost at min and max scale."""
    out = []
    for pool in pools:
        q = quote(catalog, cloud, region, pool.get("zone"), str(pool.get("instanceType")),
                  str(pool.get("capacityType") or "ON_DEMAND"))
        min_nodes, max_nodes = int(pool.get("minNodes") or 0), int(pool.get("maxNodes") or 0)
        row = {
            "name": pool.get("name"),
            "instanceType": pool.get("instanceType"),
            "accelerator": pool.get("accelerator"),
            "gpusPerNode": int(pool.get("gpusPerNode") or 0),
            "capacityType": pool.get("capacityType"),
            "zone": pool.get("zone"),
            "minNodes": min_nodes,
            "maxNodes": max_nodes,
            "pricedAs": q.priced_as,
            "usdPerNodeHour": q.usd_per_node_hour,
            "priceSource": q.source,
            "priceZone": q.zone,
            "cost": None if q.usd_per_node_hour is None else {
                "min": _money(min_nodes * q.usd_per_node_hour),
                "max": _money(max_nodes * q.usd_per_node_hour),
            },
        }
        out.append(row)
    return out


def _totals(pools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    hourly = {"min": 0.0, "max": 0.0}
    for pool in pools:
        if pool["usdPerNodeHour"] is not None:
            hourly["min"] += pool["minNodes"] * pool["usdPerNodeHour"]
            hourly["max"] += pool["maxNodes"] * pool["usdPerNodeHour"]
    return {
        "min": _money(hourly["min"]),
        "max": _money(hourly["max"]),
        "unpricedPools": [p["name"] for p in pools if p["usdPerNodeHour"] is None],
    }


# --------------------------------------------------------------------------------------------- one stack


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Stack programs and the Pulumi SDK may print; keep stdout for the report (the base run parses it as JSON)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _one_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message. A refusal meant for the user (``pulumi.RunError``, as ``pulumi up``
    prints it: ``invalid stack config: ...``; a ``ConfigError``) is its message alone; any other exception, a
    bug in the program, keeps its class name in front."""
    from infra.config import ConfigError

    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, ConfigError) or (type(exc).__name__ == "RunError" and type(exc).__module__.startswith("pulumi")):
        return first or type(exc).__name__
    return f"{type(exc).__name__}: {first}".rstrip(": ")


class StackRunner:
    """Runs stack programs under mocks, once per stack file, feeding hub stacks their workers' outputs.

    A hub stack reads its workers through ``pulumi.StackReference("org/project/<stack>")``; offline, the outputs
    come from running ``stacks/Pulumi.<stack>.yaml`` of the same checkout (the last part of the name) under mocks.
    """

    def __init__(self, program: Callable[[], None] | None = None) -> None:
        self.program = program
        self._runs: dict[Path, Any] = {}

    def run(self, path: Path) -> Any:
        """The ``RunResult`` of ``path``; raises :class:`PreviewError` with one line when the program fails."""
        path = path.resolve()
        if path not in self._runs:
            self._runs[path] = self._run(path)
        result = self._runs[path]
        if isinstance(result, PreviewError):
            raise result
        return result

    def _run(self, path: Path) -> Any:
        from infra import mockrun

        try:
            raw = _raw_config(path)
        except PreviewError as exc:
            return exc
        references: dict[str, dict[str, Any]] = {}
        hub = raw.get("hub")
        for worker in _strings(hub.get("workers") if isinstance(hub, Mapping) else None):
            local = path.parent / f"Pulumi.{worker.rsplit('/', 1)[-1]}.yaml"
            if not local.is_file():
                return PreviewError(f"hub worker {worker!r} has no stack file {local.parent.name}/{local.name}")
            try:
                references[worker] = dict(self.run(local).outputs)
            except PreviewError as exc:
                return PreviewError(f"hub worker {worker!r}: {exc}")
        saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
        mockrun.STACK_REFERENCE_OUTPUTS.update(references)
        try:
            with _stdout_to_stderr():
                return mockrun.run_stack(str(path), program=self.program)
        except Exception as exc:  # noqa: BLE001 - any failure of a stack program is reported, not raised
            return PreviewError(_one_line(exc))
        finally:
            mockrun.STACK_REFERENCE_OUTPUTS.clear()
            mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def preview_stack(name: str, path: Path, catalog: Any, runner: StackRunner | None = None) -> dict[str, Any]:
    """Run one stack under mocks; its resources, GPU pools, cost and policy violations as a JSON-able dict.

    A stack whose program fails yields ``{"error": ...}`` instead of raising.
    """
    from infra.policy import checks
    from infra.replace import fingerprint, uncovered

    doc: dict[str, Any] = {"stack": name, "file": f"stacks/{path.name}", "cloud": None, "region": None,
                           "error": None}
    try:
        raw = _raw_config(path)
        doc.update(cloud=raw.get("cloud"), region=raw.get("region"))
        run = (runner or StackRunner()).run(path)
    except PreviewError as exc:
        doc["error"] = str(exc)
        return doc
    cloud = str(run.outputs.get("cloud") or raw.get("cloud") or "")
    region = str(run.outputs.get("region") or raw.get("region") or "")
    counts: dict[str, int] = {}
    for r in run.resources:
        counts[r.type] = counts.get(r.type, 0) + 1
    pools = price_pools([p for p in run.outputs.get("nodePools") or [] if isinstance(p, Mapping)],
                        cloud, region, catalog)
    cluster = raw.get("cluster") if isinstance(raw.get("cluster"), Mapping) else {}
    # The outputs themselves (not only their names): a hub's `reachability` output is checked against the
    # `apiAccess` its workers' stack files export.
    violations = checks.run_all([checks.from_registered(r) for r in run.resources], outputs=run.outputs,
                                secret_outputs=run.secret_outputs, allowed_cidrs=checks.allowed_public_cidrs(cluster),
                                hub_cidrs=checks.allowed_api_cidrs(cluster), hub_stack=checks.hub_stack_of(cluster),
                                stack=name)
    violations += checks.check_stateful_protected(((r.name, r.type, r.protect) for r in run.resources),
                                                  checks.allow_replace_of(raw))
    doc.update({
        "cloud": cloud,
        "region": region,
        "resources": dict(sorted(counts.items())),
        "resourceCount": len(run.resources),
        "pools": pools,
        "gpus": {"min": sum(p["minNodes"] * p["gpusPerNode"] for p in pools),
                 "max": sum(p["maxNodes"] * p["gpusPerNode"] for p in pools)},
        "cost": _totals(pools),
        "violations": [v._asdict() for v in violations],
        # Per resource: the inputs whose change makes `pulumi up` replace it (infra/replace.py), compared with
        # the base's to mark REPLACE rows; values are small (CIDRs, zones, names) or digests, never secrets.
        "state": fingerprint(run.resources),
        # Types infra/data/force_new.yaml does not list: what a change to them replaces is not known offline.
        "replaceUnknownTypes": uncovered(r.type for r in run.resources),
        "allowReplace": sorted(checks.allow_replace_of(raw)),
    })
    return doc


def preview(stacks: Mapping[str, Path], program: Callable[[], None] | None = None) -> dict[str, Any]:
    """The preview document of ``stacks`` (what ``--format json`` prints). ``program`` replaces gpufleet's (tests)."""
    from placement.model.catalog import embedded_catalog

    catalog = embedded_catalog()
    runner = StackRunner(program)
    return {
        "schema": SCHEMA,
        "hoursPerMonth": HOURS_PER_MONTH,
        "catalog": {"source": catalog.source, "asOf": catalog.as_of},
        "stacks": {name: preview_stack(name, path, catalog, runner) for name, path in stacks.items()},
    }


# --------------------------------------------------------------------------------------------- baseline


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)


def resolve_ref(root: Path, ref: str) -> str:
    """The commit ``ref`` names; :class:`PreviewError` when it names none."""
    if ref.startswith("-"):
        raise PreviewError(f"bad git ref {ref!r}")
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        if _git(root, "rev-parse", "--git-dir").returncode != 0:
            raise PreviewError(f"--base needs a git checkout; {root} is not one")
        raise PreviewError(f"bad git ref {ref!r}: no such commit (fetch it first, e.g. git fetch origin)")
    return done.stdout.strip()


@contextlib.contextmanager
def worktree(root: Path, commit: str) -> Iterator[Path]:
    """A temporary detached ``git worktree`` of ``commit``, removed afterwards (also on error)."""
    parent = Path(tempfile.mkdtemp(prefix="gpufleet-base-"))
    tree = parent / "tree"
    try:
        done = _git(root, "worktree", "add", "--detach", "--quiet", str(tree), commit)
        if done.returncode != 0:
            raise PreviewError(f"git worktree add failed: {done.stderr.strip().splitlines()[-1:]}")
        yield tree
    finally:
        _git(root, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        _git(root, "worktree", "prune")


def run_base(root: Path, ref: str, names: Sequence[str] | None) -> dict[str, Any]:
    """The preview document of ``ref``, computed by ``ref``'s own ``scripts/preview`` in a worktree.

    ``names`` restricts it to those stacks (None: all of ``ref``'s stacks). A ``ref`` without ``scripts/preview``
    has no stacks to compare against.
    """
    commit = resolve_ref(root, ref)
    empty: dict[str, Any] = {"schema": SCHEMA, "stacks": {}}
    with worktree(root, commit) as tree:
        script = tree / "scripts" / "preview"
        if not script.is_file():
            return {**empty, "ref": ref, "commit": commit}
        wanted = list(discover_stacks(tree)) if names is None else [n for n in names if n in discover_stacks(tree)]
        if not wanted:
            return {**empty, "ref": ref, "commit": commit}
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
        cmd = [sys.executable, str(script), "--format", "json"]
        for name in wanted:
            cmd += ["--stack", name]
        doc, failure = _base_preview(cmd, tree, env)
        if doc is None and len(wanted) > 1:
            # An older preview fails whole on one bad stack file (a traceback, no JSON): preview the base's stacks
            # one by one, so only the broken one has no baseline.
            docs = {name: _base_preview([*cmd[:4], "--stack", name], tree, env) for name in wanted}
            good = [d for d, _ in docs.values() if d is not None]
            if good:
                doc = {**good[0], "stacks": {}}
                for name, (one, why) in docs.items():
                    doc["stacks"][name] = (one or {}).get("stacks", {}).get(name) or \
                        {"stack": name, "cloud": None, "region": None, "error": f"baseline preview failed: {why}"}
        if doc is None:
            raise PreviewError(f"preview of base {ref} ({commit[:12]}) failed: {failure}")
        doc["ref"], doc["commit"] = ref, commit
        return doc


def _base_preview(cmd: list[str], tree: Path, env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str]:
    """(the base's preview document, "") or (None, why it failed: its exit code and last line). The base may
    violate policies (exit 1) or have a broken stack (exit 2 with JSON): still a baseline."""
    from placement.errors import printable

    done = subprocess.run(cmd, cwd=tree, env=dict(env), capture_output=True, text=True, check=False)
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("stacks"), dict):
        return doc, ""
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return None, f"exit code {done.returncode}: {printable(last)}"


# --------------------------------------------------------------------------------------------- diff


def _pool_key(pool: Mapping[str, Any]) -> str:
    return str(pool.get("name"))


_POOL_FIELDS = ("instanceType", "gpusPerNode", "capacityType", "zone", "minNodes", "maxNodes", "usdPerNodeHour")


# A pool's instance type is a launch template input on EKS (a new version the node group rolls to) and the node
# pool's machine type on GKE (updated in place): neither is a replacement, and both recreate every node.
RECREATE_NOTE = "every node of the pool is recreated (a rolling replacement; running jobs are evicted)"


def _pool_notes(fields: Sequence[str], before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What a pool change does to its nodes, beyond the price: an instance-type change recreates every node."""
    if "instanceType" in fields:
        return [f"instance type {before.get('instanceType')} → {after.get('instanceType')}: {RECREATE_NOTE}"]
    return []


def _cost(doc: Mapping[str, Any] | None, scale: str, period: str) -> float:
    if not doc or doc.get("error"):
        return 0.0
    return float(((doc.get("cost") or {}).get(scale) or {}).get(period) or 0.0)


def diff_stack(base: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> dict[str, Any]:
    """Baseline vs new of one stack: cost at min/max scale, pools added/removed/changed, resource counts by type."""
    status = "added" if base is None else "removed" if new is None else "present"
    cost = {}
    for scale in ("min", "max"):
        for period in ("hour", "month"):
            b, n = _cost(base, scale, period), _cost(new, scale, period)
            cost[f"{scale}.{period}"] = {"baseline": b, "new": n, "change": round(n - b, 4)}
    base_pools = {_pool_key(p): p for p in (base or {}).get("pools") or []}
    new_pools = {_pool_key(p): p for p in (new or {}).get("pools") or []}
    changed = []
    for name in base_pools.keys() & new_pools.keys():
        before, after = base_pools[name], new_pools[name]
        fields = [f for f in _POOL_FIELDS if before.get(f) != after.get(f)]
        if fields:
            changed.append({"name": name, "fields": fields, "before": before, "after": after,
                            "notes": _pool_notes(fields, before, after)})
    types = sorted(set((base or {}).get("resources") or {}) | set((new or {}).get("resources") or {}))
    resources = {}
    for t in types:
        b = int(((base or {}).get("resources") or {}).get(t, 0))
        n = int(((new or {}).get("resources") or {}).get(t, 0))
        if b != n:
            resources[t] = {"baseline": b, "new": n, "change": n - b}
    gpus = {scale: {"baseline": int(((base or {}).get("gpus") or {}).get(scale, 0)),
                    "new": int(((new or {}).get("gpus") or {}).get(scale, 0))} for scale in ("min", "max")}
    base_state, new_state = (base or {}).get("state"), (new or {}).get("state")
    known = status != "present" or (isinstance(base_state, Mapping) and isinstance(new_state, Mapping))
    rows = replacements(base_state, new_state) if status == "present" and known else []  # type: ignore[arg-type]
    return {
        "replacements": rows,
        "replacementsKnown": known,
        "status": status,
        "cost": cost,
        "gpus": gpus,
        "resourceCount": {"baseline": int((base or {}).get("resourceCount") or 0),
                          "new": int((new or {}).get("resourceCount") or 0)},
        "poolsAdded": [new_pools[n] for n in sorted(new_pools.keys() - base_pools.keys())],
        "poolsRemoved": [base_pools[n] for n in sorted(base_pools.keys() - new_pools.keys())],
        "poolsChanged": sorted(changed, key=lambda c: c["name"]),
        "resources": resources,
        "baselineError": (base or {}).get("error"),
    }


def replacement_violations(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per stack of ``new``: the ``stateful-replace-acknowledged`` violations of its diff against ``base``."""
    from infra.policy import checks

    out: dict[str, list[dict[str, Any]]] = {}
    for name, d in diff(base, new).items():
        doc = (new.get("stacks") or {}).get(name)
        if doc and not doc.get("error"):
            found = checks.check_stateful_replacements(d["replacements"], frozenset(doc.get("allowReplace") or ()))
            out[name] = [v._asdict() for v in found]
    return out


def diff(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Per-stack diffs of two preview documents (stacks of either side)."""
    names = sorted(set(base.get("stacks") or {}) | set(new.get("stacks") or {}))
    return {n: diff_stack((base.get("stacks") or {}).get(n), (new.get("stacks") or {}).get(n)) for n in names}


def _sums(stacks: Mapping[str, Any]) -> dict[str, Any]:
    ok = [d for d in stacks.values() if isinstance(d, Mapping) and not d.get("error")]
    return {"gpus": {scale: sum(int((d.get("gpus") or {}).get(scale, 0)) for d in ok) for scale in ("min", "max")},
            "cost": {key: round(sum(_cost(d, *key.split(".")) for d in ok), 2) for _, key in COST_ROWS}}


def fleet_total(new: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole fleet: GPUs and GPU-node cost summed over the stacks that previewed (a failed stack is counted
    in ``failed``, not in the sums); with ``base``, its sums and the change (the JSON document's ``total``)."""
    stacks = new.get("stacks") or {}
    total: dict[str, Any] = {"stacks": len(stacks), "failed": sorted(n for n, d in stacks.items() if d.get("error")),
                             **_sums(stacks)}
    if base is not None:
        before = _sums(base.get("stacks") or {})
        total["baseline"] = before
        total["change"] = {key: round(total["cost"][key] - before["cost"][key], 2) for _, key in COST_ROWS}
    return total


def _total_lines(total: Mapping[str, Any], markdown: bool) -> list[str]:
    failed = f" ({len(total['failed'])} failed, not counted: {', '.join(total['failed'])})" if total["failed"] else ""
    head = (f"{total['stacks']} stack(s){failed}, {total['gpus']['min']}–{total['gpus']['max']} GPUs")
    base = total.get("baseline")
    if markdown:
        out = ["<!-- gpufleet-preview:fleet-total -->", "### gpufleet preview: fleet total", "", head, ""]
        out += ["| GPU nodes, all stacks | baseline | new | change |", "|---|---:|---:|---:|"] if base else \
               ["| GPU nodes, all stacks | estimate |", "|---|---:|"]
        for label, key in COST_ROWS:
            new = usd(total["cost"][key])
            out.append(f"| {label} | {usd(base['cost'][key])} | {new} | {usd_change(total['change'][key])} |"
                       if base else f"| {label} | {new} |")
        return [*out, ""]
    out = ["", f"== fleet total: {head}"]
    if base:
        out.append(f"  {'':22s} {'baseline':>14s} {'new':>14s} {'change':>14s}")
    for label, key in COST_ROWS:
        out.append(f"  {label:22s} {usd(base['cost'][key]):>14s} {usd(total['cost'][key]):>14s} "
                   f"{usd_change(total['change'][key]):>14s}" if base else
                   f"  {label:22s} {usd(total['cost'][key]):>14s}")
    return out


# --------------------------------------------------------------------------------------------- rendering


def usd(value: float | None) -> str:
    if value is None:
        return "no price"
    return f"${value:,.2f}"


def usd_change(value: float) -> str:
    if abs(value) < 0.005:
        return "$0.00"
    return f"{'+' if value > 0 else '-'}${abs(value):,.2f}"


def _nodes(pool: Mapping[str, Any]) -> str:
    return f"{pool['minNodes']}–{pool['maxNodes']}"


def _pool_price(pool: Mapping[str, Any]) -> str:
    if pool.get("usdPerNodeHour") is None:
        return "⚠ no price in catalog"
    note = "" if pool.get("priceSource") == "zone" else f" (region's cheapest zone {pool.get('priceZone')})"
    return f"{usd(pool['usdPerNodeHour'])}/node-h {pool['pricedAs']}{note}"


def _pool_cost(pool: Mapping[str, Any], scale: str, period: str = "hour") -> str:
    cost = pool.get("cost")
    return usd(cost[scale][period]) if cost else "no price"


def _pool_delta(pool: Mapping[str, Any], scale: str, sign: int) -> str:
    cost = pool.get("cost")
    return usd_change(sign * cost[scale]["hour"]) if cost else "no price"


COST_ROWS = (("$/h at min scale", "min.hour"), ("$/month at min scale", "min.month"),
             ("$/h at max scale", "max.hour"), ("$/month at max scale", "max.month"))


def _violation_lines(doc: Mapping[str, Any]) -> list[str]:
    return [f"[{v['rule']}] {v['resource']} ({v['type']}): {v['message']}" for v in doc.get("violations") or []]


def render_text(new: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> str:
    """Plain-text report, one block per stack (with baseline and change columns when ``base`` is given)."""
    lines = [f"gpufleet preview — GPU node cost from the {new['catalog']['source']} catalog "
             f"(as of {new['catalog']['asOf']}), {HOURS_PER_MONTH} h/month"]
    diffs = diff(base, new) if base is not None else None
    for name in sorted(set(new["stacks"]) | set(diffs or {})):
        doc = new["stacks"].get(name)
        lines.append("")
        lines.append(f"== stack {name}" + ((f" ({doc['cloud']} {doc['region']})" if doc.get("cloud") else "")
                                            if doc else " (removed)"))
        if doc and doc.get("error"):
            lines.append(f"  ERROR: {doc['error']}")
            continue
        if doc:
            lines.append(f"  resources: {doc['resourceCount']}")
            for t, n in doc["resources"].items():
                lines.append(f"    {n:4d}  {t}")
            lines.append(f"  GPU capacity: {doc['gpus']['min']}–{doc['gpus']['max']} GPUs")
            for p in doc["pools"]:
                lines.append(f"    pool {p['name']}: {p['instanceType']} × {_nodes(p)} nodes, "
                             f"{p['gpusPerNode']} GPUs/node, {p['capacityType']}, zone {p['zone']}, {_pool_price(p)}; "
                             f"min {_pool_cost(p, 'min')}/h, max {_pool_cost(p, 'max')}/h")
            if doc["cost"]["unpricedPools"]:
                lines.append(f"  WARNING: no catalog price for pools {', '.join(doc['cost']['unpricedPools'])}; "
                             "totals exclude them")
        if diffs is None:
            assert doc is not None
            for label, key in COST_ROWS:
                scale, period = key.split(".")
                lines.append(f"  {label:22s} {usd(doc['cost'][scale][period]):>14s}")
        else:
            d = diffs[name]
            if d["baselineError"]:
                lines.append(f"  baseline failed: {d['baselineError']}")
            lines.append(f"  {'':22s} {'baseline':>14s} {'new':>14s} {'change':>14s}")
            for label, key in COST_ROWS:
                c = d["cost"][key]
                lines.append(f"  {label:22s} {usd(c['baseline']):>14s} {usd(c['new']):>14s} "
                             f"{usd_change(c['change']):>14s}")
            for p in d["poolsAdded"]:
                lines.append(f"  + pool {p['name']}: {p['instanceType']} × {_nodes(p)} {p['capacityType']} "
                             f"{_pool_price(p)}, {_pool_delta(p, 'min', +1)}/h at min, "
                             f"{_pool_delta(p, 'max', +1)}/h at max")
            for p in d["poolsRemoved"]:
                lines.append(f"  - pool {p['name']}: {p['instanceType']} × {_nodes(p)} {p['capacityType']}, "
                             f"{_pool_delta(p, 'min', -1)}/h at min, {_pool_delta(p, 'max', -1)}/h at max")
            for c in d["poolsChanged"]:
                what = ", ".join(f"{f} {c['before'].get(f)} → {c['after'].get(f)}" for f in c["fields"])
                lines.append(f"  ~ pool {c['name']}: {what}")
                lines += [f"    NOTE {n}" for n in c.get("notes") or []]
            for t, c in d["resources"].items():
                lines.append(f"  {c['change']:+d} {t} ({c['baseline']} → {c['new']})")
            if not d["replacementsKnown"]:
                lines.append("  replacements: not computed (the baseline predates them)")
            if doc and doc.get("replaceUnknownTypes"):
                lines.append(f"  WARNING: replacements of {', '.join(doc['replaceUnknownTypes'])} are not predicted "
                             "(not in infra/data/force_new.yaml)")
            for r in d["replacements"]:
                lines.append(f"  {r['action'].upper()} {r['name']} ({r['type']}): {'; '.join(r['reasons'])}")
            if d["replacementsKnown"] and not d["replacements"] and d["status"] == "present":
                lines.append("  replacements: 0 (pulumi up replaces or deletes nothing in this stack)")
        if doc:
            found = _violation_lines(doc)
            lines.append("  policy: " + ("all mandatory policies pass" if not found else f"{len(found)} violation(s)"))
            lines += [f"    {v}" for v in found]
    lines += _total_lines(fleet_total(new, base), markdown=False)
    return "\n".join(lines) + "\n"


def _md_escape(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(new: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> str:
    """The PR comment: per stack a baseline / new / change cost table, pool changes, resource changes, policy."""
    out = []
    diffs = diff(base, new) if base is not None else {n: diff_stack(None, d) for n, d in new["stacks"].items()}
    where = f" vs `{base.get('ref')}` ({str(base.get('commit', ''))[:12]})" if base is not None else ""
    for name in sorted(diffs):
        doc = new["stacks"].get(name)
        d = diffs[name]
        out.append(f"<!-- gpufleet-preview:{name} -->")
        title = f"### gpufleet preview: `{name}`"
        if doc and not doc.get("error"):
            title += f" ({doc['cloud']} {doc['region']})"
        out.append(title + where)
        out.append("")
        if doc is None:
            out.append("Stack file removed in this change.")
        elif doc.get("error"):
            out.append(f"❌ **The stack program failed:** `{_md_escape(doc['error'])}`")
            out.append("")
            continue
        if d["baselineError"]:
            out.append(f"⚠ Baseline failed: `{_md_escape(d['baselineError'])}`")
        if base is not None and d["status"] == "added":
            out.append("New stack (no baseline).")
        out.append("")
        rc = d["resourceCount"]
        if base is not None:
            out.append("| GPU nodes | baseline | new | change |")
            out.append("|---|---:|---:|---:|")
            for label, key in COST_ROWS:
                c = d["cost"][key]
                change = usd_change(c["change"])
                # Bold draws the eye to a change; "no change" ($0.00) stays plain.
                out.append(f"| {label} | {usd(c['baseline'])} | {usd(c['new'])} | "
                           f"{change if change == '$0.00' else f'**{change}**'} |")
            for scale in ("min", "max"):
                g = d["gpus"][scale]
                out.append(f"| GPUs at {scale} scale | {g['baseline']} | {g['new']} | {g['new'] - g['baseline']:+d} |")
            out.append(f"| resources | {rc['baseline']} | {rc['new']} | {rc['new'] - rc['baseline']:+d} |")
        else:
            out.append("| GPU nodes | estimate |")
            out.append("|---|---:|")
            for label, key in COST_ROWS:
                out.append(f"| {label} | {usd(d['cost'][key]['new'])} |")
            for scale in ("min", "max"):
                out.append(f"| GPUs at {scale} scale | {d['gpus'][scale]['new']} |")
            out.append(f"| resources | {rc['new']} |")
        out.append("")
        if doc and doc.get("pools"):
            added = {p["name"] for p in d["poolsAdded"]}
            changed = {c["name"]: c for c in d["poolsChanged"]}
            out.append("| pool | instance type | GPUs/node | capacity | zone | nodes | price | $/h at min "
                       "| $/h at max | change |")
            out.append("|---|---|---:|---|---|---:|---|---:|---:|---|")
            for p in doc["pools"]:
                mark = "added" if p["name"] in added and base is not None else ""
                if p["name"] in changed:
                    mark = "changed: " + ", ".join(
                        f"{f} {changed[p['name']]['before'].get(f)} → {p.get(f)}" for f in changed[p["name"]]["fields"])
                    mark += "".join(f"; ⚠ {n}" for n in changed[p["name"]].get("notes") or [])
                out.append(f"| {_md_escape(p['name'])} | {p['instanceType']} | {p['gpusPerNode']} | "
                           f"{p['capacityType']} | {p['zone']} | {_nodes(p)} | {_md_escape(_pool_price(p))} | "
                           f"{_pool_cost(p, 'min')} | {_pool_cost(p, 'max')} | {_md_escape(mark)} |")
            for p in d["poolsRemoved"]:
                out.append(f"| ~~{_md_escape(p['name'])}~~ | {p['instanceType']} | {p['gpusPerNode']} | "
                           f"{p['capacityType']} | {p['zone']} | {_nodes(p)} | | {_pool_cost(p, 'min')} | "
                           f"{_pool_cost(p, 'max')} | removed |")
            out.append("")
        elif d["poolsRemoved"]:
            out += [f"- pool `{p['name']}` removed" for p in d["poolsRemoved"]] + [""]
        if doc and doc["cost"]["unpricedPools"]:
            out.append(f"⚠ **No catalog price** for {', '.join(doc['cost']['unpricedPools'])}: totals exclude them.")
            out.append("")
        if base is not None and d["status"] == "present" and not d["replacementsKnown"]:
            out.append("⚠ Replacements not computed: the baseline's preview predates them.")
            out.append("")
        if base is not None and doc and doc.get("replaceUnknownTypes"):
            out.append(f"⚠ Replacements of {', '.join(f'`{t}`' for t in doc['replaceUnknownTypes'])} are not "
                       "predicted (not in infra/data/force_new.yaml).")
            out.append("")
        if base is not None and d["replacements"]:
            out.append(f"**`pulumi up` would replace, delete or recreate the nodes of {len(d['replacements'])} "
                       "resource(s):**")
            out.append("")
            out.append("| action | resource | type | why |")
            out.append("|---|---|---|---|")
            out += [f"| **{r['action'].upper()}** | `{_md_escape(r['name'])}` | `{r['type']}` | "
                    f"{_md_escape('; '.join(r['reasons']))} |" for r in d["replacements"]]
            out.append("")
        if base is not None and d["status"] == "present" and d["replacementsKnown"] and not d["replacements"]:
            out.append("0 replacements: `pulumi up` replaces or deletes nothing in this stack.")
            out.append("")
        if base is not None and d["resources"] and d["status"] == "present":
            out.append("<details><summary>Resource changes by type</summary>")
            out.append("")
            out.append("| type | baseline | new | change |")
            out.append("|---|---:|---:|---:|")
            for t, c in d["resources"].items():
                out.append(f"| `{t}` | {c['baseline']} | {c['new']} | {c['change']:+d} |")
            out.append("")
            out.append("</details>")
            out.append("")
        if doc:
            out.append("<details><summary>Resources by type</summary>")
            out.append("")
            out.append("| type | count |")
            out.append("|---|---:|")
            out += [f"| `{t}` | {n} |" for t, n in doc["resources"].items()]
            out.append("")
            out.append("</details>")
            out.append("")
            found = doc.get("violations") or []
            if not found:
                out.append("✅ All mandatory policies pass.")
            else:
                out.append(f"❌ **{len(found)} mandatory policy violation(s)** — `pulumi up` would be blocked:")
                out += [f"- `{v['rule']}` on `{_md_escape(v['resource'])}` ({v['type']}): {_md_escape(v['message'])}"
                        for v in found]
            out.append("")
    out += _total_lines(fleet_total(new, base), markdown=True)
    out.append(f"<sub>GPU nodes only, priced from the {new['catalog']['source']} catalog as of "
               f"{new['catalog']['asOf']} (spot pools at spot prices; on-demand, capacity blocks and reservations at "
               f"on-demand prices), {HOURS_PER_MONTH} h/month. Control planes, NAT, storage and egress are not "
               "included.</sub>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/preview",
        description="Offline preview of gpufleet stacks: resources, GPU capacity, USD cost and policy checks.")
    parser.add_argument("--stack", action="append", default=[], metavar="NAME",
                        help="stack to preview (repeatable; default: every stacks/Pulumi.*.yaml)")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    parser.add_argument("--base", metavar="REF", help="git ref to diff against (e.g. origin/main)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the preview; returns the exit code (0 ok, 1 mandatory policy violation, 2 bad input)."""
    parser = _parser()
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    try:
        stacks = select_stacks(root, args.stack)
        if args.base:
            resolve_ref(root, args.base)
        new = preview(stacks)
        base = run_base(root, args.base, list(stacks) if args.stack else None) if args.base else None
    except PreviewError as exc:
        print(f"preview: {exc}", file=sys.stderr)
        return 2
    if base is not None:
        # The stateful-replace-acknowledged policy needs the diff: a replacement of a stateful resource fails it.
        for name, found in replacement_violations(base, new).items():
            new["stacks"][name]["violations"] = [*new["stacks"][name].get("violations", []), *found]
    if args.format == "json":
        doc: dict[str, Any] = dict(new)
        if base is not None:
            doc["base"] = base
            doc["diff"] = diff(base, new)
        doc["total"] = fleet_total(new, base)
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(new, base))
    else:
        sys.stdout.write(render_text(new, base))
    errors = {n: d["error"] for n, d in new["stacks"].items() if d.get("error")}
    violations = [(n, v) for n, d in new["stacks"].items() for v in d.get("violations") or []]
    # The text report on a terminal already shows each failure; repeating it on stderr printed it twice.
    # Elsewhere (a file, a PR comment, JSON) stderr is where a person or CI log sees them.
    if args.format == "text" and sys.stdout.isatty():
        if errors or violations:
            print(f"preview: {len(errors)} stack(s) failed, {len(violations)} mandatory policy violation(s) "
                  "(shown above)", file=sys.stderr)
    else:
        for name, message in errors.items():
            print(f"preview: stack {name} failed: {message}", file=sys.stderr)
        for name, v in violations:
            print(f"preview: {name}: mandatory policy {v['rule']} violated by {v['resource']} ({v['type']}): "
                  f"{v['message']}", file=sys.stderr)
    if errors:
        return 2
    return 1 if violations else 0
