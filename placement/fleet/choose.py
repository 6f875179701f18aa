"""Which existing node pools can run a job, and the portable group of a job sent through the hub. Pure.

:func:`match_existing` keeps the placement engine's ranking and marks each candidate with the pool of an
existing stack that can run it. :func:`portable_group` widens the chosen pool to every worker of the hub
a job rendered once can run on unchanged (``placement submit --via-hub``; ``placement dispatch`` then
picks among them). The group rule, by the chosen candidate:

* several nodes on an EFA shape (``efa``): AWS workers with EFA pools of an accepted accelerator and the
  same GPUs per node;
* several nodes on GPUDirect-TCPXO (``tcpxo``, A3 Mega), GPUDirect-TCPX (``tcpx``, A3 High) or RDMA
  (``rdma``, A3 Ultra / A4): GKE workers with pools of that same fabric kind, accepted accelerator, GPUs
  per node and GPU networks (the pod names them);
* one node (``single-node``): any worker, on any cloud the job allows, with a pool of an accepted
  accelerator whose node holds the job's GPUs (nothing in the pod is cloud-specific: checkpoints come
  from each worker's ``gpufleet-checkpoint`` ConfigMap).

Every member also needs: the job's capacity kinds, its clouds/regions, ``maxNodes`` for the node count,
the ``all-workers`` LocalQueue in the job's namespace and the same training service account name. The pod
selects the group's pools by name (``gpufleet.io/pool In [...]``), so a worker whose other pools share a
name with a group pool joins only when that does not let the job onto a pool outside the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from placement.fleet.stacks import ClusterStack, HubStack, Pool, Queue
from placement.model import kueue as ko
from placement.model.jobspec import JobSpec
from placement.model.shapes import Shape, shape_book
from placement.model.zones import is_aws_zone_id
from placement.plan.job import Candidate, Plan

SINGLE_NODE = "single-node"
GROUPS = ("efa", "tcpx", "tcpxo", "rdma", SINGLE_NODE)


@dataclass(frozen=True)
class Existing:
    """A candidate some stack's pool can run; ``note`` explains an approximate (zone name vs ID) match."""

    cluster: ClusterStack
    pool: Pool
    namespace: str
    queue: str
    note: str | None = None


@dataclass(frozen=True)
class Choice:
    """The ranked candidates annotated with the existing cluster each can use (``None``: needs a new stack)."""

    ranked: tuple[Candidate, ...]
    existing: tuple[Existing | None, ...]
    reasons: tuple[str, ...]  # why pools of a wanted accelerator cannot take the job

    @property
    def chosen_index(self) -> int | None:
        return next((i for i, e in enumerate(self.existing) if e is not None), None)


def _zone_kind(cloud: str, zone: str) -> str:
    return "id" if cloud == "aws" and is_aws_zone_id(zone) else "name"


def match_existing(plan: Plan, clusters: Sequence[ClusterStack], job: JobSpec,
                   hub: HubStack | None = None, *, via_hub: bool = False) -> Choice:
    """Annotate every runnable candidate of ``plan`` with the pool that can run it, if any.

    A pool matches a candidate with the same cloud, region, zone, instance type and capacity when
    its ``maxNodes`` covers the candidate's nodes and the team namespace has this cluster's
    LocalQueue. Through the hub (``via_hub``) the job goes to the ``all-workers`` queue: the hub must
    list the cluster and have that queue in the namespace, and so must the worker. AWS stacks export
    zone IDs; a catalog with zone names (SkyPilot's) cannot be compared zone by zone, so then the
    dearest zone of the region stands for the pool.
    """
    ranked = plan.ranked
    wanted = set(job.accelerators)
    index: dict[tuple[str, str, str, str], list[tuple[ClusterStack, Pool]]] = {}
    reasons: list[str] = []
    for cl in clusters:
        for pool in cl.pools:
            index.setdefault((cl.cloud, cl.region, pool.instance_type, pool.capacity), []).append((cl, pool))

    def blocker(cl: ClusterStack, pool: Pool, nodes: int) -> tuple[str | None, str, str]:
        ns = job.team or cl.default_namespace()
        if ns is None:
            return "set team: the stack exports no kueue.localQueues to pick a namespace from", "", ""
        if via_hub:
            queue: str | None = ko.ALL_WORKERS if cl.has_queue(ns, ko.ALL_WORKERS) else None
            if queue is None:
                return f"namespace {ns} has no LocalQueue {ko.ALL_WORKERS}", ns, ""
        else:
            queue = cl.queue_for(ns)
            if queue is None:
                return f"namespace {ns} has no LocalQueue {ko.cluster_queue_name(cl.cluster_name)}", ns, ""
        if pool.max_nodes < nodes:
            return f"maxNodes {pool.max_nodes} < {nodes} nodes needed", ns, queue
        if hub is not None:
            if hub.worker_key(cl.cluster_name) is None:
                return f"not a worker of hub {hub.stack}", ns, queue
            if Queue(ns, queue) not in hub.local_queues:
                return f"hub {hub.stack} has no LocalQueue {queue} in {ns}", ns, queue
        return None, ns, queue

    existing: list[Existing | None] = [None] * len(ranked)
    loose: dict[tuple[str, str], int] = {}  # (stack, pool) -> index of its dearest zone-name candidate
    for i, c in enumerate(ranked):
        o = c.offer
        for cl, pool in index.get((o.cloud, o.region, o.instance_type, c.capacity), []):
            exact = pool.zone == o.zone
            approx = not exact and _zone_kind(o.cloud, pool.zone) != _zone_kind(o.cloud, o.zone)
            if not (exact or approx):
                continue
            why, ns, queue = blocker(cl, pool, c.nodes)
            if why is not None:
                continue
            if exact:
                existing[i] = Existing(cl, pool, ns, queue)
                break
            key = (cl.stack, pool.name)
            prev = loose.get(key)
            if prev is None or c.cost.total_usd > ranked[prev].cost.total_usd:
                loose[key] = i
    for (stack, pool_name), i in loose.items():
        if existing[i] is not None:
            continue
        cl = next(x for x in clusters if x.stack == stack)
        pool = next(p for p in cl.pools if p.name == pool_name)
        _, ns, queue = blocker(cl, pool, ranked[i].nodes)
        existing[i] = Existing(cl, pool, ns, queue, note=f"pool zone {pool.zone} is a zone ID, the catalog lists zone "
                               "names: priced at the region's dearest zone")

    matched = {(e.cluster.stack, e.pool.name) for e in existing if e is not None}
    excluded = plan.excluded
    book = shape_book()
    for cl in clusters:
        for pool in cl.pools:
            shape = book.get(pool.instance_type)
            if shape is None or shape.accelerator not in wanted or (cl.stack, pool.name) in matched:
                continue
            nodes = -(-job.gpus // shape.gpus)
            why, _, _ = blocker(cl, pool, nodes)
            if why is None:
                ex = next((c for c in excluded if c.offer.instance_type == pool.instance_type
                           and c.offer.region == cl.region and c.offer.zone == pool.zone
                           and c.capacity == pool.capacity), None)
                why = f"not runnable: {ex.excluded}" if ex is not None else f"no {pool.capacity} catalog offer in " \
                      f"{pool.zone}"
            reasons.append(f"{cl.stack}/{pool.name} ({pool.instance_type} {pool.capacity}): {why}")
    if not reasons and not matched:
        reasons.append(f"no stack has a {'/'.join(job.accelerators)} node pool")
    return Choice(ranked=ranked, existing=tuple(existing), reasons=tuple(reasons))


# ----------------------------------------------------------------------------- the portable group


def gke_networks(cluster: ClusterStack, pool: Pool, shape: Shape) -> tuple[str, ...]:
    """The GKE ``Network`` names a pod of the pool attaches, from the stack's ``gpuNetworks`` output; for
    stacks without it, the names infra/gcp gives them (vpc1..N, or gvnic-1 and rdma-0..N-1)."""
    exported = cluster.gpu_networks.get(pool.name)
    if exported:
        return exported
    if shape.fabric == "rdma":
        return (*(f"gvnic-{i}" for i in range(1, shape.gpu_vpcs + 1)),
                *(f"rdma-{i}" for i in range(shape.rdma_subnets)))
    return tuple(f"vpc{i}" for i in range(1, shape.gpu_vpcs + 1))


@dataclass(frozen=True)
class Member:
    """A worker of the group: its MultiKueueCluster key, its stack and the pools the job may use there."""

    key: str
    cluster: ClusterStack
    pools: tuple[Pool, ...]


@dataclass(frozen=True)
class Group:
    """Where a job sent through the hub may run (see the module docstring for the rule).

    ``gpus_per_node`` is what each of the ``nodes`` pods asks for; ``excluded`` says why other workers are
    not members (``"key: reason"``)."""

    name: str
    nodes: int
    gpus_per_node: int
    members: tuple[Member, ...]
    excluded: tuple[str, ...]
    networks: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(m.key for m in self.members)

    @property
    def pool_names(self) -> tuple[str, ...]:
        return tuple(sorted({p.name for m in self.members for p in m.pools}))

    def shapes(self) -> list[Shape]:
        book = shape_book()
        return [s for m in self.members for p in m.pools if (s := book.get(p.instance_type)) is not None]


def group_name(candidate: Candidate) -> str:
    """The fabric group of the chosen candidate: its shape's fabric kind when it spans nodes, else one node."""
    return candidate.offer.shape.fabric if candidate.nodes > 1 else SINGLE_NODE


def portable_group(job: JobSpec, candidate: Candidate, chosen: Existing, clusters: Sequence[ClusterStack],
                   hub: HubStack | None) -> Group:
    """Every worker a job rendered for ``chosen`` (the cheapest existing pool) can also run on unchanged."""
    shape = candidate.offer.shape
    name = group_name(candidate)
    nodes = candidate.nodes
    per_node = shape.gpus if nodes > 1 else min(shape.gpus, job.gpus)
    networks = gke_networks(chosen.cluster, chosen.pool, shape) if name in ("tcpx", "tcpxo", "rdma") else ()
    account = chosen.cluster.service_account.name if chosen.cluster.service_account else None
    ns = chosen.namespace
    book = shape_book()

    def key_of(cl: ClusterStack) -> str | None:
        if hub is not None:
            return hub.worker_key(cl.cluster_name)
        try:
            return ko.worker_key(cl.stack)
        except ValueError:
            return None

    def fits(cl: ClusterStack, pool: Pool) -> bool:
        s = book.get(pool.instance_type)
        if s is None or s.accelerator not in job.accelerators or pool.capacity not in job.capacities():
            return False
        if name == SINGLE_NODE:
            return s.gpus >= per_node and pool.max_nodes >= 1
        if s.fabric != name or s.gpus != per_node or pool.max_nodes < nodes or s.cloud != cl.cloud:
            return False
        return not networks or gke_networks(cl, pool, s) == networks

    candidates: list[tuple[str, ClusterStack, tuple[Pool, ...], tuple[Pool, ...]]] = []
    excluded: list[str] = []
    ordered = [chosen.cluster] + sorted((c for c in clusters if c is not chosen.cluster), key=lambda c: c.stack)
    for cl in ordered:
        key = key_of(cl)
        label = key or cl.stack
        why = None
        if key is None:
            why = f"not a worker of hub {hub.stack}" if hub is not None else "stack name is not a DNS label"
        elif job.allows(cl.cloud, cl.region):
            why = str(job.allows(cl.cloud, cl.region))
        elif not cl.has_queue(ns, ko.ALL_WORKERS):
            why = f"no LocalQueue {ko.ALL_WORKERS} in {ns}"
        elif account is not None and cl.service_account is not None and cl.service_account.name != account:
            why = f"training service account {cl.service_account.name}, not {account}"
        good = tuple(p for p in cl.pools if fits(cl, p))
        if why is None and not good:
            why = f"no pool of the {name} group ({'/'.join(job.accelerators)}, {per_node} GPUs per node)"
        if why is not None:
            excluded.append(f"{label}: {why}")
            continue
        assert key is not None
        candidates.append((key, cl, good, tuple(p for p in cl.pools if p not in good)))

    members: list[Member] = []
    names: set[str] = set()
    others: set[str] = set()  # names of pools outside the group on members
    for key, cl, good, bad in candidates:
        good_names = {p.name for p in good}
        bad_names = {p.name for p in bad}
        clash = sorted((bad_names & (names | good_names)) | (good_names & others))
        if clash and members:
            excluded.append(f"{key}: pool name {clash[0]} is also a pool outside the group on a member worker")
            continue
        members.append(Member(key=key, cluster=cl, pools=good))
        names |= good_names
        others |= bad_names
    return Group(name=name, nodes=nodes, gpus_per_node=per_node, members=tuple(members), excluded=tuple(excluded),
                 networks=networks)
