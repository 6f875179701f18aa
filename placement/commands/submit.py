"""``placement submit``: place a job on a cluster that exists and hand it to Kueue.

Steps: read the clusters from their Pulumi stack outputs (:mod:`placement.fleet.outputs`), rank the job
over the catalog exactly as ``placement plan`` does, keep the candidates some stack's node pool can hold
(:func:`placement.fleet.choose.match_existing`), render the Job/JobSet (:mod:`placement.fleet.manifests`)
and create it with the Kubernetes client (:mod:`placement.fleet.kube`), or print it with ``--dry-run``.

Directly, the job is pinned to the chosen pool and sent to that cluster's queue. ``--via-hub`` sends a
portable job to the MultiKueue hub's ``all-workers`` queue instead: valid on every worker of its fabric
group (:func:`placement.fleet.choose.portable_group`), with the job spec and the group recorded for
``placement dispatch``, which nominates the worker. This module only parses, calls and prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placement.commands.render import SCHEMA, candidate_doc, catalog_info, fit_table, wrap
from placement.console import EXIT_BAD_INPUT, EXIT_NOTHING_FEASIBLE, EXIT_OK, output_width
from placement.errors import shown as quoted
from placement.fleet import durable
from placement.fleet.choose import Choice, Group, portable_group
from placement.fleet.errors import FleetError
from placement.fleet.manifests import JOB_UID_LABEL, Target, manifest_yaml, render, render_portable
from placement.fleet.stacks import HubStack
from placement.model.jobspec import JobSpec

if TYPE_CHECKING:
    from placement.fleet.stacks import Stacks
    from placement.model.catalog import Catalog, Offer

NEW_STACK_ROWS = 5  # "needs a new stack" candidates shown next to the existing-cluster ones
SubmitError = FleetError


@dataclass(frozen=True)
class Submitted:
    kind: str
    namespace: str
    name: str
    uid: str
    reused: tuple[str, ...]  # storage objects that already existed ("<cluster>: <Kind> <name>" through the hub)


def add_arguments(s: argparse.ArgumentParser) -> None:
    from placement.commands.common import add_calibration_flags, add_data_flags

    s.add_argument("job", metavar="JOB.yaml", help="job spec (README.md#job-spec)")
    s.add_argument("--stacks", metavar="FILE", help="stack outputs exported with `pulumi stack output --json` "
                                                    "(docs/kueue-hub.md#placement-submit; try "
                                                    "placement/examples/stacks-outputs.json)")
    s.add_argument("--stack", action="append", default=[], metavar="NAME",
                   help="a Pulumi stack to read outputs from with `pulumi stack output --json` (repeatable)")
    s.add_argument("--via-hub", action="store_true",
                   help="send a portable job to the MultiKueue hub's all-workers queue; placement dispatch picks the "
                        "worker of its fabric group")
    s.add_argument("--dry-run", action="store_true", help="print the manifest instead of applying it")
    s.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig to apply with (default: the stack's output)")
    s.add_argument("--write-stack", metavar="FILE",
                   help="when a new stack would be cheaper (or is needed), write its stack file to FILE instead of "
                        "printing it (never overwrites; docs/placement.md#submit-and-a-new-stack)")
    add_data_flags(s, live=False)
    add_calibration_flags(s)


def _usd(x: float) -> str:
    return "-" if math.isinf(x) else f"{x:,.2f}"


def shown(choice: Choice) -> list[int]:
    """Indexes of the rows to show: every existing-cluster candidate plus the best few needing a new stack."""
    new = [i for i, e in enumerate(choice.existing) if e is None][:NEW_STACK_ROWS]
    return sorted({i for i, e in enumerate(choice.existing) if e is not None} | set(new))


def text_table(job: JobSpec, choice: Choice, catalog: Catalog, width: int | None = None) -> str:
    """The candidates on existing clusters and the best few needing a new stack, fitted to ``width`` columns."""
    chosen = choice.chosen_index
    rows = []
    for i in shown(choice):
        c, e = choice.ranked[i], choice.existing[i]
        o = c.offer
        where = f"{e.cluster.stack}/{e.pool.name}" if e else "needs a new stack"
        notes = ", ".join([*c.notes, *([e.note] if e and e.note else [])])
        rows.append([("*" if i == chosen else "") + str(i + 1), o.cloud, o.region, o.zone,
                     f"{o.instance_type} x{c.nodes}", c.capacity, _usd(c.usd_per_hour), _usd(c.cost.total_usd),
                     where, notes])
    head = (f"job {job.name}: {job.gpus} x {'/'.join(job.accelerators)}, {job.hours:g} h, capacity {job.capacity} "
            f"(catalog {catalog.source}, as of {catalog.as_of})")
    body = fit_table(("#", "cloud", "region", "zone", "instance x nodes", "capacity", "$/h", "total $", "cluster",
                      "notes"), rows, right={0, 6, 7}, width=width, drop=("zone", "$/h")
                     ) if rows else "(no runnable candidate)"
    return wrap(head, width, "    ") + "\n" + body


def why(choice: Choice) -> str:
    i = choice.chosen_index
    if i is None:
        return "no existing cluster can run this job: " + "; ".join(choice.reasons)
    c, e = choice.ranked[i], choice.existing[i]
    assert e is not None
    text = (f"cheapest existing cluster: {e.cluster.stack} pool {e.pool.name} ({c.offer.zone} {c.offer.instance_type}"
            f" x{c.nodes} {c.capacity}), total ${c.cost.total_usd:,.2f}")
    best = choice.ranked[0]
    if i > 0 and best.cost.total_usd < c.cost.total_usd:
        text += (f"; a new stack in {best.offer.cloud} {best.offer.zone} ({best.offer.instance_type} {best.capacity}) "
                 f"would cost ${c.cost.total_usd - best.cost.total_usd:,.2f} less")
    return text


def group_doc(group: Group) -> dict[str, Any]:
    return {"name": group.name, "nodes": group.nodes, "gpus_per_node": group.gpus_per_node,
            "workers": list(group.keys), "pools": list(group.pool_names), "excluded": list(group.excluded)}


def submit_doc(job: JobSpec, choice: Choice, catalog: Catalog, *, via_hub: bool, dry_run: bool,
               target: Target | None, manifest: Sequence[Mapping[str, Any]] | None, warnings: Sequence[str],
               submitted: Submitted | None, group: Group | None = None,
               destinations: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The ``gpufleet.placement/v1`` document of kind ``submit``; ``manifest_clusters[i]`` says which cluster
    ``manifest[i]`` goes to (``role`` ``cluster``, ``worker`` or ``hub``, ``stack``, ``cluster``)."""
    def cand(i: int) -> dict[str, Any]:
        e = choice.existing[i]
        d = candidate_doc(choice.ranked[i], i + 1)
        if e is not None and e.note:
            d["notes"].append(e.note)
        d["existing_cluster"] = {"stack": e.cluster.stack, "pool": e.pool.name} if e else None
        return d

    chosen = None
    if target is not None and choice.chosen_index is not None:
        e = target.existing
        chosen = {**cand(choice.chosen_index), "stack": e.cluster.stack, "pool": e.pool.name, "queue": e.queue,
                  "namespace": e.namespace, "cluster": e.cluster.cluster_name, "kind": target.kind,
                  "via_hub": via_hub}
        if group is not None:
            chosen["group"] = group_doc(group)
        chosen["run"] = run_doc(target, group)
    doc: dict[str, Any] = {
        "schema": SCHEMA, "kind": "submit", "job": job.name, "catalog": catalog_info(catalog),
        "dry_run": dry_run, "chosen": chosen, "why": why(choice),
        "candidates": [cand(i) for i in shown(choice)], "warnings": list(warnings),
    }
    if manifest is not None:
        doc["manifest"] = list(manifest)
        doc["manifest_clusters"] = list(destinations or [])
    if submitted is not None:
        # uid "" (and no selector) when the API server created the job but its answer was unreadable.
        doc["submitted"] = {"kind": submitted.kind, "namespace": submitted.namespace, "name": submitted.name,
                            "uid": submitted.uid,
                            "workload_selector": f"{JOB_UID_LABEL}={submitted.uid}" if submitted.uid else None,
                            "nominated_workload": None, "reused": list(submitted.reused)}
    return doc


def run_doc(target: Target, group: Group | None = None) -> dict[str, Any]:
    """How the job is run to its end (docs/trainer-contract.md): the interruptions the plan expects, the
    restart budget sized from them, the checkpoint interval, grace period (fitting every cloud of the hub
    ``group``) and Kueue's maximum execution time."""
    from placement.fleet.manifests import lifecycle, planned_interruptions

    c = target.candidate
    clouds = sorted({m.cluster.cloud for m in group.members}) if group else [target.existing.cluster.cloud]
    life = lifecycle(target.job, c, clouds, target.now, target.restart_expected)
    expected = planned_interruptions(c) if target.restart_expected is None else target.restart_expected
    doc: dict[str, Any] = {
        "expected_interruptions": round(expected, 3), "max_restarts": life.restarts,
        "checkpoint_interval_seconds": life.checkpoint_interval_s, "grace_seconds": life.grace_s,
        "max_exec_seconds": life.max_exec_seconds, "deadline": life.deadline,
        "restart_basis": target.restart_basis or f"{target.existing.cluster.stack}/{target.existing.pool.name} "
                                                  f"{c.capacity} (the planned pool)"}
    if target.destination is not None:
        d = target.destination
        doc["checkpoint"] = {"destination": d.kind, "priced_as": d.engine, "capacity_gb": d.capacity_gb,
                             "tier_mbps_per_tib": d.tier, "mounted": d.mounted,
                             "write_seconds": round(c.checkpoint_write_minutes * 60.0, 3),
                             "interval_seconds": life.checkpoint_interval_s,
                             "overhead": round(c.cost.spot_overhead, 6)}
    return doc


def run_line(target: Target, group: Group | None = None) -> str:
    """One line on how the job survives its run: restarts for disruptions, fail fast otherwise."""
    run = run_doc(target, group)
    line = (f"restarts: up to {run['max_restarts']} for node disruptions and lost peers "
            f"({run['expected_interruptions']:.1f} interruptions expected over the run"
            + (f" on {run['restart_basis']}" if target.restart_basis else "") + "); any other trainer "
            f"failure fails the job at once; SIGTERM leaves {run['grace_seconds']} s to checkpoint "
            "(docs/trainer-contract.md)")
    ck = run.get("checkpoint")
    if ck and target.destination is not None:
        line += (f"; checkpoints to {target.destination.label()}"
                 + (f" (priced as {ck['priced_as']})" if target.destination.kind == "filestore" else "")
                 + f": {ck['write_seconds']:g} s a write, every {ck['interval_seconds']} s, "
                 f"{ck['overhead']:.1%} overhead")
    return line


def _new_stack(job: JobSpec, choice: Choice) -> tuple[str, str] | None:
    """The stack file for the cheapest candidate when it needs a new stack and is cheaper than the chosen
    existing cluster (or no existing cluster can run the job): what `why` names."""
    from placement.fleet.new_stack import new_stack

    if not choice.ranked or choice.existing[0] is not None:
        return None
    best, i = choice.ranked[0], choice.chosen_index
    if i is not None and not best.cost.total_usd < choice.ranked[i].cost.total_usd:
        return None
    return new_stack(job, best)


def _write_new(path: str, text: str) -> None:
    """Write ``text`` to a new file ``path`` (exclusive create: an existing file is never overwritten)."""
    from placement.errors import UsageError

    try:
        with open(path, "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        raise UsageError(f"--write-stack: {quoted(path)} exists; give a new path (a stack file is never "
                         "overwritten)") from None


def _pick_hub(stacks: Stacks) -> HubStack | None:
    from placement.errors import UsageError

    if len(stacks.hubs) > 1:
        raise UsageError("--via-hub: more than one hub stack given (" + ", ".join(h.stack for h in stacks.hubs)
                         + "); pass one")
    return stacks.hubs[0] if stacks.hubs else None


def run_submit(args: argparse.Namespace) -> int:
    """``placement submit``: exit 0 placed (or printed), 1 no existing cluster / cluster error, 2 bad input."""
    if not getattr(args, "dry_run", False):  # --dry-run prints the manifests: no cluster, no client
        from placement.console import require_extra

        require_extra("submit", ("kubernetes",), "placement submit (without --dry-run)")
    try:
        return _run(args)
    except FleetError as exc:
        from placement.fleet.redact import redact

        print(f"placement: error: {redact(exc)}", file=sys.stderr)  # an API error may echo a credential
        return exc.code


def destinations(manifest: Sequence[Mapping[str, Any]], target: Target, group: Group | None,
                 per_worker: Mapping[str, Sequence[Mapping[str, Any]]], hub: HubStack | None
                 ) -> list[dict[str, Any]]:
    """Which cluster each object of ``manifest`` is created on: without the hub, the chosen cluster; through
    it, each worker's storage objects on that worker and the job on the hub."""
    if group is None:
        cl = target.existing.cluster
        return [{"role": "cluster", "stack": cl.stack, "cluster": cl.cluster_name}] * len(manifest)
    out = [{"role": "worker", "stack": m.cluster.stack, "cluster": m.cluster.cluster_name, "worker": m.key}
           for m in group.members for _ in per_worker.get(m.key) or []]
    return [*out, {"role": "hub", "stack": hub.stack if hub else None, "cluster": None}]


def headers(dest: Sequence[Mapping[str, Any]]) -> list[str | None]:
    """A comment above the first object of each cluster's run of documents, naming that cluster."""
    out: list[str | None] = []
    for i, d in enumerate(dest):
        if i and dest[i - 1] == d:
            out.append(None)
        elif d["role"] == "hub":
            out.append(f"==== hub{' stack ' + d['stack'] if d['stack'] else ''}: create this on the hub cluster "
                       "(its kubeconfig), after the\nworkers' objects above; MultiKueue copies it to the worker that "
                       "admits it")
        elif d["role"] == "worker":
            out.append(f"==== worker {d['worker']}: cluster {d['cluster']} (stack {d['stack']});\n"
                       "create these with that stack's kubeconfig")
        else:
            out.append(f"==== cluster {d['cluster']} (stack {d['stack']}): every object below;\n"
                       "`kubectl apply -f -` with that stack's kubeconfig")
    return out


def _submission_time(args: argparse.Namespace) -> dt.datetime:
    """When the job is submitted (``--now`` when the command has it): fixes the pod's ``GPUFLEET_DEADLINE``."""
    now = getattr(args, "now", None)
    if isinstance(now, str) and now:
        from placement.model.reservations import parse_time

        return parse_time(now, "--now", "")
    return dt.datetime.now(dt.UTC)


def _run(args: argparse.Namespace) -> int:
    from placement.errors import UsageError, in_file
    from placement.files.inputs import load_catalog, load_quotas
    from placement.files.readers import load_yaml
    from placement.fleet.choose import match_existing
    from placement.fleet.outputs import load_stacks
    from placement.model.jobspec import parse_job
    from placement.plan.job import plan

    write_stack = getattr(args, "write_stack", None)
    if write_stack is not None and (not write_stack.strip() or os.path.lexists(write_stack)):
        raise UsageError(f"--write-stack: {quoted(write_stack)} " + ("exists; give a new path (a stack file is never "
                         "overwritten)" if write_stack.strip() else "is empty; give a file path"))
    job_doc = load_yaml(args.job, "job spec")
    with in_file(args.job):
        job = parse_job(job_doc)
    stacks = load_stacks(args.stacks, args.stack)
    if not stacks.clusters:
        raise UsageError("--stacks: no worker cluster stack given (only hub stacks)")
    hub = _pick_hub(stacks) if args.via_hub else None
    catalog = load_catalog(args.catalog)
    from placement.files.calibrations import apply_calibration

    _, offers, job = apply_calibration(args, dt.datetime.now(dt.UTC), catalog.offers, job)
    result = plan(job, offers, load_quotas(args.quotas))
    choice = match_existing(result, stacks.clusters, job, hub, via_hub=args.via_hub)
    i = choice.chosen_index
    target = None
    group = None
    manifest: list[dict[str, Any]] | None = None
    per_worker: dict[str, list[dict[str, Any]]] = {}
    warnings: list[str] = []
    if i is not None:
        existing = choice.existing[i]
        assert existing is not None
        target = Target(job=job, candidate=choice.ranked[i], existing=existing, via_hub=args.via_hub,
                        now=_submission_time(args), job_doc=job_doc)
        if args.via_hub:
            group = portable_group(job, target.candidate, existing, stacks.clusters, hub)
            target, choice = _priced_for_hub(target, choice, group, catalog.offers)
            obj, per_worker, warnings = render_portable(job, job_doc, target.candidate, existing, group,
                                                        now=target.now, expected=target.restart_expected)
            manifest = [*(d for m in group.members for d in per_worker[m.key]), obj]
            if hub is None:
                warnings.append(f"--via-hub without a hub stack: assuming the hub has LocalQueue {existing.queue} in "
                                f"{existing.namespace} and the workers' MultiKueueClusters are named after their "
                                "stacks")
            elif hub.dispatcher != "External":
                warnings.append(f"hub {hub.stack} uses the {hub.dispatcher} dispatcher: Kueue copies the job to every "
                                "worker of all-workers; the pool affinity keeps it to the group's pools "
                                "(placement dispatch needs gpufleet:hub.dispatcher External)")
        else:
            target, choice = _priced_for_mount(target, choice, catalog.offers)
            manifest, warnings = render(target)
    width = output_width(sys.stderr if args.dry_run else sys.stdout)
    table_text = text_table(job, choice, catalog, width)
    summary = []
    if target is not None:
        e = target.existing
        if group is not None:
            route = (f"hub queue {e.queue} -> {group.name} group: {', '.join(group.keys)} "
                     "(placement dispatch nominates the worker)")
        else:
            route = f"queue {e.queue}"
        summary.append(f"chosen: {e.cluster.stack} pool {e.pool.name}, {target.kind} {e.namespace}/{job.name}, {route}")
        summary.append(run_line(target, group))
    summary += [f"warning: {w}" for w in warnings]
    summary.append("why: " + why(choice))
    summary = [wrap(line, width, "    ") for line in summary]

    dest = destinations(manifest, target, group, per_worker, hub) if target and manifest else []
    _check_annotations(manifest)
    if args.dry_run and group is not None:
        clusters = len({(d["role"], d["stack"]) for d in dest})
        summary.insert(1, wrap(f"apply: the YAML holds objects for {clusters} clusters, each run headed by a "
                               "comment naming its cluster; create each run with that cluster's kubeconfig (not "
                               "one `kubectl apply` of the whole stream)", width, "    "))

    fresh = _new_stack(job, choice)
    stack_lines: list[str] = []
    if fresh is not None:
        name, stack_text = fresh
        if write_stack is not None:
            _write_new(write_stack, stack_text)
            stack_lines = [wrap(f"new stack: wrote {write_stack} (stack {name}); check it with `scripts/preview "
                                f"--stack {name}` once saved as stacks/Pulumi.{name}.yaml", width, "    ")]
        else:
            stack_lines = [f"new stack {name} (--write-stack FILE writes it):", stack_text.rstrip("\n")]

    def doc(**kw: Any) -> str:
        d = submit_doc(job, choice, catalog, via_hub=args.via_hub, dry_run=args.dry_run, warnings=warnings,
                       group=group, destinations=dest, **kw)
        if fresh is not None:
            d["new_stack"] = {"stack": fresh[0], "file": fresh[1], "written_to": write_stack}
        return json.dumps(d, indent=2, allow_nan=False)

    if target is None or manifest is None:
        if args.json:
            print(doc(target=None, manifest=None, submitted=None))
        else:
            print("\n".join([table_text, *stack_lines]), file=sys.stderr if args.dry_run else sys.stdout)
        print(f"placement: no existing cluster can run {job.name}: " + "; ".join(choice.reasons), file=sys.stderr)
        return EXIT_NOTHING_FEASIBLE

    if args.dry_run:
        if args.json:
            print(doc(target=target, manifest=manifest, submitted=None))
        else:
            print(table_text + "\n" + "\n".join([*summary, *stack_lines]), file=sys.stderr)
            sys.stdout.write(manifest_yaml(manifest, headers(dest)))
        return EXIT_OK

    if not args.json:
        print(table_text + "\n" + "\n".join([*summary, *stack_lines]))
        sys.stdout.flush()
    submitted = _submit(args, target, manifest, hub, group, per_worker)
    if args.json:
        print(doc(target=target, manifest=manifest, submitted=submitted))
    else:
        e = target.existing
        print(f"submitted {submitted.kind} {submitted.namespace}/{submitted.name} to "
              f"{'the hub' if args.via_hub else e.cluster.cluster_name} (queue {e.queue})")
        for r in submitted.reused:
            print(f"reused existing {r}")
        if submitted.uid:
            print(f"watch: kubectl -n {submitted.namespace} get workloads -l {JOB_UID_LABEL}={submitted.uid}")
        else:
            print("placement: warning: the API server created the job but its answer was not readable (uid "
                  "unknown); do not submit it again", file=sys.stderr)
        print(f"       kubectl -n {submitted.namespace} get {submitted.kind.lower()} {submitted.name}")
    return EXIT_OK


def _repriced(target: Target, choice: Choice, dest: durable.Destination, offers: Sequence[Offer]
              ) -> tuple[Target, Choice]:
    """``target`` (and its row of ``choice``) priced with checkpoints written to ``dest``: the interval, the write
    time and the overhead the pod will see."""
    i = choice.chosen_index
    c = durable.reprice(target.job, target.candidate, dest, offers)
    if i is not None and c is not choice.ranked[i]:
        choice = dataclasses.replace(choice, ranked=(*choice.ranked[:i], c, *choice.ranked[i + 1:]))
    return dataclasses.replace(target, candidate=c, destination=dest), choice


def _priced_for_mount(target: Target, choice: Choice, offers: Sequence[Offer]) -> tuple[Target, Choice]:
    """Submit directly: priced for what the chosen pool's pods mount (its stack's filesystem and tier), else the
    object store."""
    from placement.fleet.manifests import checkpoint_storage

    e = target.existing
    dest = durable.destination(e.cluster, checkpoint_storage(e.cluster, e.namespace).volume)
    return _repriced(target, choice, dest, offers)


def _priced_for_hub(target: Target, choice: Choice, group: Group, offers: Sequence[Offer]) -> tuple[Target, Choice]:
    """Through the hub: priced for what the pod writes to wherever it lands (:func:`manifests.
    portable_destination`), the restart budget sized for the most interruption-prone pool its affinity admits."""
    from placement.fleet.manifests import _portable_storage, portable_destination

    e = target.existing
    storage, _ = _portable_storage(group, e.namespace)
    target, choice = _repriced(target, choice, portable_destination(e, group, storage.volume), offers)
    planned_key = next((m.key for m in group.members if m.cluster is e.cluster), e.cluster.stack)
    assert target.destination is not None
    budget = durable.hub_budget(durable.priced_job(target.job, target.destination), target.candidate, planned_key,
                                e.pool.name, group, offers)
    basis = (f"{budget.worker}/{budget.pool} {budget.capacity} (the most interruption-prone capacity the job's "
             "affinity admits)")
    return dataclasses.replace(target, restart_expected=budget.expected, restart_basis=basis), choice


def _check_annotations(manifest: Sequence[Mapping[str, Any]] | None) -> None:
    """Exit 2 before any request (``--dry-run`` too) when an object's annotations exceed the API limit."""
    from placement.fleet.kube import annotation_problems

    problems = annotation_problems(manifest or ())
    if problems:
        raise FleetError(f"{problems[0]}: shorten the job spec (it travels as an annotation) and submit again",
                         EXIT_BAD_INPUT)


def _remove_hint(created: Sequence[tuple[str, str]]) -> str:
    """How to remove what a failed ``--via-hub`` submit created: one kubectl command per object, per cluster."""
    if not created:
        return " (nothing was created)"
    cmds = []
    for cluster, what in created:
        kind, _, ref = what.partition(" ")
        ns, _, name = ref.rpartition("/")
        cmds.append(f"kubectl --kubeconfig <{cluster} kubeconfig> delete {kind.lower()} "
                    + (f"-n {ns} {name}" if ns else name))
    return ("; created so far: " + ", ".join(f"{c}: {w}" for c, w in created)
            + "; a retry reuses them, or remove them with: " + "; ".join(cmds))


def _submitted(created: dict[str, Any], main: Mapping[str, Any], reused: list[str]) -> Submitted:
    meta = created.get("metadata") or {}
    return Submitted(kind=str(main["kind"]), namespace=str(main["metadata"]["namespace"]),
                     name=str(main["metadata"]["name"]), uid=str(meta.get("uid") or ""), reused=tuple(reused))


def _submit(args: argparse.Namespace, target: Target, manifest: Sequence[Mapping[str, Any]],
            hub: HubStack | None, group: Group | None, per_worker: Mapping[str, Sequence[Mapping[str, Any]]]
            ) -> Submitted:
    from placement.fleet.kube import api_client, create_all

    cl = target.existing.cluster
    main = manifest[-1]
    reused: list[str] = []
    done: list[str] = []  # created so far, named by any error so a retry knows they exist (and reuses them)
    if group is not None:
        if not args.kubeconfig and (hub is None or hub.kubeconfig is None):
            raise FleetError("--via-hub: pass --kubeconfig with the hub cluster's kubeconfig (the hub stack "
                             "exports none)", EXIT_BAD_INPUT)
        hub_api = api_client(hub.kubeconfig if hub and not args.kubeconfig else None, args.kubeconfig,
                             f"{hub.stack if hub else 'hub'}.kubeconfig")
        # Every member's kubeconfig is loaded before anything is created: one unusable kubeconfig must not
        # leave objects on the members before it.
        apis = {}
        for m in group.members:
            if per_worker.get(m.key):
                if m.cluster.kubeconfig is None:
                    raise FleetError(f"--via-hub: worker {m.key} (stack {m.cluster.stack}) exports no kubeconfig; "
                                     "nothing was created", EXIT_BAD_INPUT)
                try:
                    apis[m.key] = api_client(m.cluster.kubeconfig, None, f"{m.cluster.stack}.kubeconfig")
                except FleetError as exc:
                    raise FleetError(f"--via-hub: worker {m.key}: {exc}; nothing was created", exc.code) from None
        # Storage first, on every worker the job may land on (MultiKueue runs the pods there), with each
        # worker's own stack kubeconfig; then the job on the hub, where only Kueue's bookkeeping happens.
        where: list[tuple[str, str]] = []  # (cluster, object) created so far, for the message of a failure
        try:
            for m in group.members:
                docs = per_worker.get(m.key) or []
                if not docs:
                    continue
                before = len(done)
                try:
                    for out in create_all(docs, apis[m.key], done=done):
                        if "reused" in out:
                            reused.append(f"{m.key}: {out['reused']}")
                finally:
                    where += [(m.key, w) for w in done[before:]]
            (created,) = create_all([main], hub_api, reuse=False, done=done)
        except FleetError as exc:
            first = str(exc).split(" (already created, kept and reused by a retry:")[0]
            raise FleetError(first + _remove_hint(where), exc.code) from None
        return _submitted(created, main, reused)
    if not args.kubeconfig and cl.kubeconfig is None:
        raise FleetError(f"{cl.stack} exports no kubeconfig: pass --kubeconfig PATH", EXIT_BAD_INPUT)
    api = api_client(cl.kubeconfig, args.kubeconfig, f"{cl.stack}.kubeconfig")
    outs = create_all(manifest[:-1], api, done=done)
    reused += [o["reused"] for o in outs if "reused" in o]
    (created,) = create_all([main], api, reuse=False, done=done)
    return _submitted(created, main, reused)
