"""The MultiKueue hub stack: one Kueue manager that dispatches jobs to the worker clusters.

The hub cluster is any small Kubernetes cluster (no GPUs) that the hub's provider (:func:`hub_provider`, which
reads what the default provider would) reaches: set ``kubernetes:kubeconfig`` in ``stacks/Pulumi.hub.yaml`` (or
leave it unset to use ``$KUBECONFIG`` / ``~/.kube/config``). The workers are read through ``pulumi.StackReference`` from
their stack outputs (``clusterName``, ``cloud``, ``region``, ``kubeconfig``, ``nodePools``, ``apiAccess``
and the rest of what the dispatcher's fleet file carries), so every worker stack (with its
:class:`~infra.k8s.addons.ClusterAddons`) must be up before the hub.

The hub installs JobSet, then Kueue in manager mode. Per worker it creates, on the worker (through a
provider built from its kubeconfig output), a ``multikueue-hub`` ServiceAccount with the RBAC MultiKueue
needs and a long-lived token Secret; and on the hub a kubeconfig Secret holding that token, a
MultiKueueCluster, a MultiKueueConfig, a MultiKueue AdmissionCheck, a ClusterQueue and a LocalQueue
per team. The ``all-workers`` MultiKueueConfig / AdmissionCheck / ClusterQueue / LocalQueues span every
worker; the hub Cohort alone holds each worker's capacity (its pools), which every hub ClusterQueue
borrows, so a worker's capacity is counted once. With the External dispatcher the hub also runs
``placement dispatch`` (:mod:`infra.k8s.dispatcher`) and gives it a read-only identity on every worker.
See docs/kueue-hub.md (How a job submitted to the hub reaches a worker) for the path a job takes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi import Output, ResourceOptions

from infra.config import ConfigError, StackConfig
from infra.config.stack import linked_ranges
from infra.k8s import dispatcher as dp
from infra.k8s import kueue_objects as ko
from infra.k8s.addons import JobSetInstall, JobSetInstallArgs, KueueInstall, KueueInstallArgs, KueueObject
from infra.k8s.dispatch_image import DispatcherImage, DispatcherImageArgs
from infra.k8s.dispatcher import Dispatcher, DispatcherArgs
from infra.k8s.prometheus import hub_prometheus
from infra.policy.checks import worker_path
from infra.protect import cluster_identity, k8s_provider_args

HUB_SERVICE_ACCOUNT = "multikueue-hub"

_CREATE_READ_DELETE = ("create", "delete", "get", "list", "watch")
# The ClusterRole Kueue's MultiKueue controller needs on a worker: the rules of Kueue v0.19.2's
# site/static/examples/multikueue/create-multikueue-kubeconfig.sh, rule for rule and in its order
# (api group, resources, verbs). The Workload update/patch verbs are what MultiKueue uses to drop the
# finalizers of remote copies; rayclusters get them for the same reason.
UPSTREAM_WORKER_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("batch", ("jobs",), _CREATE_READ_DELETE),
    ("batch", ("jobs/status",), ("get",)),
    ("", ("pods",), _CREATE_READ_DELETE),
    ("apps", ("statefulsets",), _CREATE_READ_DELETE),
    ("apps", ("statefulsets/status",), ("get",)),
    ("leaderworkerset.x-k8s.io", ("leaderworkersets",), _CREATE_READ_DELETE),
    ("leaderworkerset.x-k8s.io", ("leaderworkersets/status",), ("get",)),
    ("jobset.x-k8s.io", ("jobsets",), _CREATE_READ_DELETE),
    ("jobset.x-k8s.io", ("jobsets/status",), ("get",)),
    ("kueue.x-k8s.io", ("workloads",), (*_CREATE_READ_DELETE, "update", "patch")),
    ("kueue.x-k8s.io", ("clusterqueues", "localqueues"), ("get", "list", "watch")),
    ("kueue.x-k8s.io", ("workloads/status",), ("get", "patch", "update")),
    ("kubeflow.org", ("tfjobs",), _CREATE_READ_DELETE),
    ("kubeflow.org", ("tfjobs/status",), ("get",)),
    ("kubeflow.org", ("paddlejobs",), _CREATE_READ_DELETE),
    ("kubeflow.org", ("paddlejobs/status",), ("get",)),
    ("kubeflow.org", ("pytorchjobs",), _CREATE_READ_DELETE),
    ("kubeflow.org", ("pytorchjobs/status",), ("get",)),
    ("kubeflow.org", ("xgboostjobs",), _CREATE_READ_DELETE),
    ("kubeflow.org", ("xgboostjobs/status",), ("get",)),
    ("kubeflow.org", ("mpijobs",), _CREATE_READ_DELETE),
    ("kubeflow.org", ("mpijobs/status",), ("get",)),
    ("ray.io", ("rayjobs",), _CREATE_READ_DELETE),
    ("ray.io", ("rayjobs/status",), ("get",)),
    ("ray.io", ("rayclusters",), (*_CREATE_READ_DELETE, "update", "patch")),
    ("ray.io", ("rayclusters/status",), ("get",)),
    ("ray.io", ("rayservices",), _CREATE_READ_DELETE),
    ("ray.io", ("rayservices/status",), ("get",)),
    ("workload.codeflare.dev", ("appwrappers",), _CREATE_READ_DELETE),
    ("workload.codeflare.dev", ("appwrappers/status",), ("get",)),
)
# Job kinds our Kueue config integrates that the upstream script does not list (Kubeflow Trainer v2).
EXTRA_WORKER_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("trainer.kubeflow.org", ("trainjobs",), _CREATE_READ_DELETE),
    ("trainer.kubeflow.org", ("trainjobs/status",), ("get",)),
)

# Verbs Kueue v0.19.2's MultiKueue adapters use on a worker that the upstream script does not grant: the
# batch/job adapter patches the remote Job of an elastic job (workload slices, feature gate
# ElasticJobsViaWorkloadSlices, beta and on by default since v0.18) to follow its parallelism and workload
# (pkg/controller/jobs/job/job_multikueue_adapter.go: syncElasticJob, clientutil.Patch on the remote client).
# Only jobs that opt in (annotation kueue.x-k8s.io/elastic-job) take that path; without the verb their
# scale-ups never reach the worker. Granted where the job kind is (the team namespaces).
UPSTREAM_DRIFT_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("batch", ("jobs",), ("patch",)),
)


def multikueue_rbac_rules() -> list[dict[str, Any]]:
    """Upstream's worker ClusterRole rules then ours, unsplit: the reference :func:`multikueue_worker_rules`
    narrows (to the kinds the hub integrates) and splits (cluster-wide reads, namespaced writes)."""
    return [_rbac_rule(group, resources, verbs)
            for group, resources, verbs in (*UPSTREAM_WORKER_RULES, *EXTRA_WORKER_RULES)]


# The object each Kueue integration (Configuration ``integrations.frameworks``, Kueue v0.19.2's FrameworkName
# constants) has MultiKueue create on a worker, through its MultiKueue adapter
# (pkg/controller/jobs/*/*_multikueue_adapter.go). ``deployment`` has no adapter of its own: MultiKueue
# creates its Pods on the worker through the pod adapter (site docs tasks/run/multikueue/deployment.md; since
# v0.15 without ``pod`` in the list). None: a kind MultiKueue never creates on a worker.
FRAMEWORK_RESOURCES: Mapping[str, tuple[str, str] | None] = {
    "batch/job": ("batch", "jobs"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets"),
    "kubeflow.org/pytorchjob": ("kubeflow.org", "pytorchjobs"),
    "kubeflow.org/mpijob": ("kubeflow.org", "mpijobs"),
    "kubeflow.org/tfjob": ("kubeflow.org", "tfjobs"),
    "kubeflow.org/paddlejob": ("kubeflow.org", "paddlejobs"),
    "kubeflow.org/xgboostjob": ("kubeflow.org", "xgboostjobs"),
    "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "trainjobs"),
    "ray.io/rayjob": ("ray.io", "rayjobs"),
    "ray.io/raycluster": ("ray.io", "rayclusters"),
    "ray.io/rayservice": ("ray.io", "rayservices"),
    "workload.codeflare.dev/appwrapper": ("workload.codeflare.dev", "appwrappers"),
    "leaderworkerset.x-k8s.io/leaderworkerset": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    "statefulset": ("apps", "statefulsets"),
    "pod": ("", "pods"),
    "deployment": ("", "pods"),
    "sparkoperator.k8s.io/sparkapplication": None,
}
# What MultiKueue reads cluster-wide on a worker: its remote client watches Workloads and every adapter's kind in
# all namespaces (a label selector on the origin, which RBAC cannot narrow), and caches ClusterQueues and
# LocalQueues (multikueuecluster.go: establishWatcher, startQueueWatchers). Every other verb acts on one object
# in the namespace of the hub's workload, so it is granted there only.
_CLUSTER_WIDE_VERBS = frozenset({"list", "watch"})
_QUEUES = ("kueue.x-k8s.io", ("clusterqueues", "localqueues"))


def hub_frameworks(dispatcher: str) -> tuple[str, ...]:
    """The integrations the hub's Kueue runs (its manager config's ``integrations.frameworks``)."""
    import yaml

    config = yaml.safe_load(ko.manager_config(dispatcher, wait_for_pods_ready=False))
    return tuple(config["integrations"]["frameworks"])


def multikueue_worker_rules(frameworks: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(cluster_rules, namespace_rules)`` for the hub's MultiKueue identity on a worker: upstream's rules
    (:data:`UPSTREAM_WORKER_RULES`, :data:`EXTRA_WORKER_RULES`; :data:`UPSTREAM_DRIFT_RULES` added to their
    kinds) for Workloads and the kinds of ``frameworks``
    only, split so the ClusterRole only lists and watches (and reads the queues), and every create, delete,
    get, update and patch is a Role in each team namespace. Raises ValueError for a framework whose kind
    :data:`FRAMEWORK_RESOURCES` does not know (a new integration must be granted deliberately)."""
    kinds: set[tuple[str, str]] = {("kueue.x-k8s.io", "workloads")}
    for framework in frameworks:
        if framework not in FRAMEWORK_RESOURCES:
            raise ValueError(f"Kueue integration {framework!r} has no MultiKueue worker rule in FRAMEWORK_RESOURCES")
        kind = FRAMEWORK_RESOURCES[framework]
        if kind is not None:
            kinds.add(kind)
    cluster: list[dict[str, Any]] = []
    namespaced: list[dict[str, Any]] = []
    for group, resources, verbs in (*UPSTREAM_WORKER_RULES, *EXTRA_WORKER_RULES):
        if (group, resources) == _QUEUES:
            cluster.append(_rbac_rule(group, resources, verbs))
            continue
        (resource,) = resources
        if (group, resource.split("/", 1)[0]) not in kinds:
            continue
        verbs = (*verbs, *(v for g, r, extra in UPSTREAM_DRIFT_RULES if (g, r) == (group, resources)
                           for v in extra if v not in verbs))
        wide = [v for v in verbs if v in _CLUSTER_WIDE_VERBS]
        local = [v for v in verbs if v not in _CLUSTER_WIDE_VERBS]
        if wide:
            cluster.append(_rbac_rule(group, resources, wide))
        if local:
            namespaced.append(_rbac_rule(group, resources, local))
    return cluster, namespaced


def _rbac_rule(group: str, resources: Sequence[str], verbs: Sequence[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}


def _meta(name: str, namespace: str | None = None,
          annotations: dict[str, str] | None = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, annotations=annotations,
                                      labels={"app.kubernetes.io/managed-by": "gpufleet"})


def _pick(rendered: Output[dict[str, dict[str, Any]]], key: str) -> Output[dict[str, Any]]:
    return rendered.apply(lambda r: r[key])


def _kubeconfig_text(value: Any) -> str:
    """Stack outputs may hold a kubeconfig as YAML/JSON text or as a mapping."""
    return value if isinstance(value, str) else json.dumps(value)


def _secret_kubeconfig(worker_kubeconfig: Any, token: str, user: str, key: str) -> str:
    """The kubeconfig a hub Secret holds for worker ``key``: data only (server, CA data, a static token), in the
    form the dispatcher loads (``placement.fleet.kube.static_kubeconfig``); refused here, at ``pulumi up``,
    when the worker's kubeconfig gives no server or CA as data."""
    from placement.fleet.errors import FleetError
    from placement.fleet.kube import static_kubeconfig

    text = ko.multikueue_kubeconfig(worker_kubeconfig, token, user=user)
    try:
        static_kubeconfig(text, f"worker {key} kubeconfig Secret")
    except FleetError as exc:
        raise ValueError(f"{exc} (the worker stack's kubeconfig output must carry server and "
                         "certificate-authority-data)") from None
    return text


def _token(secret: k8s.core.v1.Secret) -> Output[str]:
    """The service-account token the control plane writes into a token Secret (base64 in ``data``)."""
    return secret.data.apply(lambda d: base64.b64decode((d or {})["token"]).decode())


def _worker_identity(name: str, account: str, role_name: str, rules: list[dict[str, Any]],
                     opts: ResourceOptions, *, namespace_rules: list[dict[str, Any]] | None = None,
                     namespaces: Sequence[str] = ()) -> k8s.core.v1.Secret:
    """On a worker (``opts.provider``): ServiceAccount ``account`` in kueue-system bound to ClusterRole
    ``role_name`` with ``rules`` and, with ``namespace_rules``, to a Role ``role_name`` with them in each of
    ``namespaces``; and a long-lived token Secret for it (returned)."""
    sa = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=_meta(account, ko.KUEUE_NAMESPACE), opts=opts)
    subjects = [k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=sa.metadata.name, namespace=ko.KUEUE_NAMESPACE)]
    role = k8s.rbac.v1.ClusterRole(f"{name}-role", metadata=_meta(role_name), rules=dp.manifest(rules), opts=opts)
    bindings: list[pulumi.Resource] = [k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-binding",
        metadata=_meta(role_name),
        role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                         name=role.metadata.name),
        subjects=subjects,
        opts=opts,
    )]
    for namespace in namespaces if namespace_rules else ():
        ns_role = k8s.rbac.v1.Role(f"{name}-role-{namespace}", metadata=_meta(role_name, namespace),
                                   rules=dp.manifest(namespace_rules), opts=opts)
        bindings.append(k8s.rbac.v1.RoleBinding(
            f"{name}-binding-{namespace}",
            metadata=_meta(role_name, namespace),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role",
                                             name=ns_role.metadata.name),
            subjects=subjects,
            opts=opts,
        ))
    # A token Secret the control plane fills in; it lives as long as the Secret (no expiry to renew).
    return k8s.core.v1.Secret(
        f"{name}-token",
        metadata=_meta(f"{account}-token", ko.KUEUE_NAMESPACE,
                       annotations={"kubernetes.io/service-account.name": account}),
        type="kubernetes.io/service-account-token",
        opts=ResourceOptions.merge(opts, ResourceOptions(depends_on=[sa, *bindings])),
    )


def _worker_of(stack: str, outputs: Mapping[str, Any]) -> ko.Worker:
    """The worker read from its stack outputs; a missing or malformed output stops `pulumi up` with one line
    naming the worker stack and the output (RunError), not a traceback."""
    try:
        return ko.worker_from_outputs(stack, outputs)
    except ValueError as exc:
        raise pulumi.RunError(f"invalid worker stack outputs: {exc}") from None


def worker_checkpoint(cloud: Any, bucket: Any, role_arn: Any, google_sa: Any, issuer: Any = None,
                      training_account: Any = None) -> dict[str, Any] | None:
    """A worker's entry of the hub's ``workerCheckpoints`` output from its stack outputs: ``cloud``, ``bucket``
    and ``trainingIdentity`` (AWS ``trainingRoleArn``, GCP ``trainingGoogleServiceAccount``); on GCP also the
    cluster's ``issuer`` (``serviceAccountIssuer``) and the ``subjects`` of its training service accounts
    (``trainingServiceAccount``), which AWS workers federate (issue 35). None while the worker exports no bucket
    or identity yet."""
    identity = role_arn if cloud == "aws" else google_sa if cloud == "gcp" else None
    if not isinstance(bucket, str) or not bucket or not isinstance(identity, str) or not identity:
        return None
    entry: dict[str, Any] = {"cloud": cloud, "bucket": bucket, "trainingIdentity": identity}
    if cloud == "gcp" and isinstance(issuer, str) and isinstance(training_account, Mapping):
        name, namespaces = training_account.get("name"), training_account.get("namespaces")
        if isinstance(name, str) and isinstance(namespaces, list):
            entry["issuer"] = issuer
            entry["subjects"] = [f"system:serviceaccount:{ns}:{name}" for ns in namespaces if isinstance(ns, str)]
    return entry


def api_access_of(outputs: Any) -> dict[str, Any] | None:
    """A worker's ``apiAccess`` output as exported (:func:`infra.outputs.api_access_output`), or None."""
    return dict(outputs) if isinstance(outputs, Mapping) else None


@dataclass(frozen=True)
class MultiKueueWorkerArgs:
    """``stack``: the worker's fully qualified stack (``org/project/stack``); ``hub_cfg`` the hub config;
    ``depends_on`` the hub's Kueue release and team namespaces."""

    stack: str
    hub_cfg: StackConfig
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    # gpufleet:hub.providerMigration: drop-name-identifier for one update of a hub last updated with the
    # hub-worker:<stack> identifiers (infra.protect.MIGRATIONS).
    migration: str | None = None


class MultiKueueWorker(pulumi.ComponentResource):
    """One worker cluster joined to the hub. ``worker`` is an ``Output[Worker]`` read from its outputs;
    ``fleet_entry`` its entry of the dispatcher's fleet file (no secrets); ``api_access`` its exported
    ``apiAccess`` (None when it exports none)."""

    def __init__(self, name: str, args: MultiKueueWorkerArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:MultiKueueWorker", name, None, opts)
        cfg = args.hub_cfg
        self.key = ko.worker_key(args.stack)
        ref = pulumi.StackReference(f"{name}-ref", stack_name=args.stack, opts=ResourceOptions(parent=self))
        required = {k: ref.require_output(k) for k in ("cloud", "region", "clusterName", "nodePools")}
        optional = {k: ref.get_output(k) for k in (*dp.FLEET_OUTPUTS, *dp.OPTIONAL_FLEET_OUTPUTS)
                    if k not in required}
        self.worker: Output[ko.Worker] = Output.all(**required).apply(lambda o: _worker_of(args.stack, o))
        self.fleet_entry: Output[dict[str, Any]] = Output.all(**required, **optional).apply(dp.fleet_entry)
        self.api_access: Output[dict[str, Any] | None] = ref.get_output("apiAccess").apply(api_access_of)
        self.hub_link: Output[dict[str, Any] | None] = ref.get_output("hubLink").apply(api_access_of)
        # Its checkpoint bucket and training identity: the hub hands them to the other workers, which grant it
        # access to their buckets (infra.hub_link.checkpoint_peers).
        self.checkpoint: Output[dict[str, Any] | None] = Output.all(
            ref.get_output("cloud"), ref.get_output("checkpointBucket"), ref.get_output("trainingRoleArn"),
            ref.get_output("trainingGoogleServiceAccount"), ref.get_output("serviceAccountIssuer"),
            ref.get_output("trainingServiceAccount")).apply(lambda o: worker_checkpoint(*o))
        self.ref = ref
        worker_kubeconfig = Output.secret(ref.require_output("kubeconfig")).apply(_kubeconfig_text)

        # --- on the worker: an identity for the hub's Kueue controller
        # The worker cluster's unique identity (its exported clusterIdentity: GKE DNS endpoint, EKS OIDC issuer),
        # not its kubeconfig's server, decides whether this provider (and everything it made on the worker) is
        # replaced: the server moves when a worker turns its public endpoint on or off, and a worker re-created
        # under the same name is a new cluster. A worker that exports none yet (not updated since) gets none:
        # the server decides until it does.
        identity = ref.get_output("clusterIdentity").apply(
            lambda i: None if args.migration == "drop-name-identifier" else cluster_identity("hub-worker", i))
        worker_provider = k8s.Provider(f"{name}-provider", kubeconfig=worker_kubeconfig,
                                       **k8s_provider_args(identity), opts=ResourceOptions(parent=self))
        on_worker = ResourceOptions(parent=self, provider=worker_provider)
        # Cluster-wide it only lists and watches; it creates, deletes and updates in the team namespaces
        # only (where the hub's LocalQueues are, so where every copied workload and job lands).
        cluster_rules, namespace_rules = multikueue_worker_rules(hub_frameworks(cfg.hub.dispatcher))
        token_secret = _worker_identity(name, HUB_SERVICE_ACCOUNT, f"gpufleet-{HUB_SERVICE_ACCOUNT}",
                                        cluster_rules, on_worker, namespace_rules=namespace_rules,
                                        namespaces=cfg.kueue.teams)

        # --- on the hub: the kubeconfig Secret and the Kueue objects
        user = f"{self.key}-{HUB_SERVICE_ACCOUNT}"
        kubeconfig: Output[str] = Output.all(worker_kubeconfig, _token(token_secret)).apply(
            lambda kt: _secret_kubeconfig(kt[0], kt[1], user, self.key))
        self.secret = k8s.core.v1.Secret(
            f"{name}-kubeconfig",
            metadata=_meta(ko.kubeconfig_secret_name(self.key), ko.KUEUE_NAMESPACE),
            string_data={ko.MULTIKUEUE_KUBECONFIG_KEY: kubeconfig},
            opts=ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )

        # --- External dispatcher: a read-only identity on the worker, its kubeconfig on the hub
        self.dispatch_secret: k8s.core.v1.Secret | None = None
        if cfg.hub.dispatcher == "External":
            reader_token = _worker_identity(f"{name}-dispatch", dp.NAME, dp.WORKER_READER_ROLE,
                                            dp.worker_reader_rules(), on_worker)
            reader_kubeconfig: Output[str] = Output.all(worker_kubeconfig, _token(reader_token)).apply(
                lambda kt: _secret_kubeconfig(kt[0], kt[1], f"{self.key}-{dp.NAME}", self.key))
            self.dispatch_secret = k8s.core.v1.Secret(
                f"{name}-dispatch-kubeconfig",
                metadata=_meta(dp.kubeconfig_secret_name(self.key), ko.KUEUE_NAMESPACE),
                string_data={dp.KUBECONFIG_KEY: reader_kubeconfig},
                opts=ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )

        rendered = self.worker.apply(lambda w: ko.hub_worker_objects(w, cfg))
        previous: list[pulumi.Resource] = [self.secret, *args.depends_on]
        self.objects: dict[str, KueueObject] = {}
        for key, kind in ko.hub_worker_layout(cfg):
            res = KueueObject(f"{name}-{key}", ko.API_VERSION, kind, _pick(rendered, key),
                              opts=ResourceOptions(parent=self, depends_on=list(previous)))
            self.objects[key] = res
            previous.append(res)

        self.cluster_queue = self.worker.apply(lambda w: ko.cluster_queue_name(w.cluster_name))
        self.register_outputs({"worker": self.key, "clusterQueue": self.cluster_queue,
                               "kubeconfigSecret": self.secret.metadata.name})


@dataclass(frozen=True)
class MultiKueueHubArgs:
    """The hub stack config (``role: hub``; ``hub.workers``, ``hub.dispatcher``, ``kueue.*``)."""

    cfg: StackConfig


class MultiKueueHub(pulumi.ComponentResource):
    """Kueue in manager mode plus one :class:`MultiKueueWorker` per worker and the all-workers queue."""

    def __init__(self, name: str, args: MultiKueueHubArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:MultiKueueHub", name, None, opts)
        cfg = args.cfg
        # MultiKueue needs the JobSet API on the manager too (it creates the JobSet on the hub, suspended,
        # and mirrors the worker's copy), and Kueue should start with it served.
        self.jobset = JobSetInstall(f"{name}-jobset", JobSetInstallArgs(), opts=ResourceOptions(parent=self))
        kueue = KueueInstall(f"{name}-kueue",
                             KueueInstallArgs(version=cfg.kueue.version, dispatcher=cfg.hub.dispatcher,
                                              wait_for_pods_ready=False, depends_on=[self.jobset.release]),
                             opts=ResourceOptions(parent=self))
        from infra.protect import stateful  # a team Namespace holds its jobs: protected and retained

        namespaces = [
            k8s.core.v1.Namespace(f"{name}-ns-{team}",
                                  metadata={"name": team, "labels": {"app.kubernetes.io/managed-by": "gpufleet",
                                                                     "gpufleet.io/team": team}},
                                  opts=stateful(cfg, f"{name}-ns-{team}", ResourceOptions(parent=self)))
            for team in cfg.kueue.teams
        ]
        base: list[pulumi.Resource] = [kueue.release, *namespaces]
        # Workloads keep their priority class name when copied, so the hub and every worker define them.
        priorities = [KueueObject.of(f"{name}-wpc-{o['metadata']['name']}", o,
                                     opts=ResourceOptions(parent=self, depends_on=base))
                      for o in ko.priority_classes()]

        self.workers: list[MultiKueueWorker] = []
        for stack in cfg.hub.workers:
            key = ko.worker_key(stack)
            self.workers.append(MultiKueueWorker(
                f"{name}-{key}", MultiKueueWorkerArgs(stack=stack, hub_cfg=cfg, depends_on=[*base, *priorities],
                                                      migration=cfg.hub.provider_migration),
                opts=ResourceOptions(parent=self)))

        rendered = Output.all(*[w.worker for w in self.workers]).apply(
            lambda ws: ko.hub_all_workers_objects(list(ws), cfg))
        previous: list[pulumi.Resource] = [*base, *priorities, *self.workers]
        self.all_workers: dict[str, KueueObject] = {}
        for key, kind in ko.hub_all_workers_layout(cfg):
            res = KueueObject(f"{name}-{ko.ALL_WORKERS}-{key}", ko.API_VERSION, kind,
                              _pick(rendered, key),
                              opts=ResourceOptions(parent=self, depends_on=list(previous)))
            self.all_workers[key] = res
            previous.append(res)

        self.cluster_queues = Output.all(*[w.cluster_queue for w in self.workers]).apply(
            lambda names: [*names, ko.ALL_WORKERS])
        self.local_queues = Output.all(*[w.worker for w in self.workers]).apply(
            lambda ws: [{"namespace": team, "name": ko.local_queue_name(w.cluster_name, team)}
                        for w in ws for team in cfg.kueue.teams]
            + [{"namespace": team, "name": ko.ALL_WORKERS} for team in cfg.kueue.teams])

        # Per worker, what the hub needs (its egress CIDRs) next to what the worker authorises and the route it
        # offers (its hubLink: private link, address ranges): the `hub-reaches-workers` policy checks one against
        # the other from these stack outputs.
        hub_ranges = [{"key": f"gpufleet:{key}", "cidr": cidr} for key, cidr in linked_ranges(cfg)]
        vpn_keys = {ko.worker_key(s) for s in (cfg.hub.vpn.workers if cfg.hub.vpn else ())}
        self.reachability: Output[dict[str, Any]] = Output.all(
            Output.all(*[w.api_access for w in self.workers]), Output.all(*[w.hub_link for w in self.workers])).apply(
            lambda al: {w.key: {"egressCidrs": list(cfg.hub.egress_cidrs), "hubRanges": hub_ranges,
                                "apiAccess": access, "hubLink": link, "vpn": w.key in vpn_keys,
                                "path": worker_path(link, w.key in vpn_keys)}
                        for w, access, link in zip(self.workers, al[0], al[1], strict=True)})

        # Opt-in: an HA VPN from the hub's VPC to each GCP worker of hub.vpn (infra.link).
        self.vpns = _worker_vpns(name, cfg, self.workers, parent=self)

        self.dispatcher: Dispatcher | None = None
        self.dispatcher_image: DispatcherImage | None = None
        # Where the dispatcher's observations are kept (infra.k8s.prometheus), unless the user names a server.
        self.prometheus = (hub_prometheus(name, cfg.hub.dispatch, cfg.cloud, (), self)
                           if cfg.hub.dispatcher == "External" else None)
        if cfg.hub.dispatcher == "External":
            image: Output[str] | None = None
            if cfg.hub.dispatch.image is None:
                self.dispatcher_image = DispatcherImage(f"{name}-dispatch-image", DispatcherImageArgs(cfg=cfg),
                                                        opts=ResourceOptions(parent=self))
                image = self.dispatcher_image.ref
            fleet = Output.all(*[w.fleet_entry for w in self.workers]).apply(
                lambda entries: dp.fleet_document({w.key: e for w, e in zip(self.workers, entries, strict=True)}))
            self.dispatcher = Dispatcher(
                f"{name}-dispatch",
                DispatcherArgs(cfg=cfg.hub.dispatch, fleet=fleet, worker_keys=[w.key for w in self.workers],
                               image=image, depends_on=[kueue.release, *self.workers, *self.all_workers.values()]),
                opts=ResourceOptions(parent=self))
        # What each worker reads back from the hub (infra/hub_link.py): every worker's address ranges, so a worker
        # whose ranges overlap another's is refused at its own `pulumi up`.
        self.worker_ranges: Output[dict[str, Any]] = Output.all(*[w.hub_link for w in self.workers]).apply(
            lambda links: {w.key: list((link or {}).get("addressRanges") or [])
                           for w, link in zip(self.workers, links, strict=True)})
        # Every worker's checkpoint bucket and training identity, read back by each worker to grant the others
        # of its cloud access to its bucket (a job re-routed between them resumes from its checkpoint home).
        self.worker_checkpoints: Output[dict[str, Any]] = Output.all(*[w.checkpoint for w in self.workers]).apply(
            lambda entries: {w.key: e for w, e in zip(self.workers, entries, strict=True) if e is not None})
        self.vpn_workers = sorted(vpn_keys)
        self.register_outputs({"clusterQueues": self.cluster_queues, "localQueues": self.local_queues,
                               "reachability": self.reachability})


def _gcp_network(stack: str, outputs: Mapping[str, Any]) -> str:
    """The primary VPC of a GCP worker, from its outputs (the GKE stack names it after the cluster)."""
    if outputs.get("cloud") != "gcp":
        raise pulumi.RunError(f"gpufleet:hub.vpn links GCP workers only; worker stack {stack} is on "
                              f"{outputs.get('cloud')}: remove it from gpufleet:hub.vpn.workers")
    return f"projects/{outputs['project']}/global/networks/{outputs['clusterName']}"


def _worker_vpns(name: str, cfg: StackConfig, workers: Sequence[MultiKueueWorker],
                 parent: pulumi.Resource) -> list[pulumi.Resource]:
    """The hub VPC's one virtual private gateway (``hub.vpn``: created, or the existing ``vpnGatewayId``) and an
    :class:`infra.link.HaVpn` from it to each GCP worker listed: the AWS side in the hub's region, the GCP side
    in the worker's project, region and primary VPC. Returns the gateway component, then the VPNs."""
    if cfg.hub.vpn is None:
        return []
    import pulumi_aws as aws
    import pulumi_gcp as gcp

    from infra.link import AwsEnd, AwsGatewayArgs, AwsVpnGateway, GcpEnd, HaVpn, HaVpnArgs

    vpn = cfg.hub.vpn
    aws_provider = aws.Provider(f"{name}-vpn-aws", region=cfg.region, opts=ResourceOptions(parent=parent))
    gateway = AwsVpnGateway(f"{name}-vpn-gateway", AwsGatewayArgs(
        vpc_id=vpn.vpc_id, region=cfg.region, route_table_ids=vpn.route_table_ids, provider=aws_provider,
        asn=vpn.amazon_asn, existing_gateway_id=vpn.vpn_gateway_id, tags=dict(cfg.tags)),
        opts=ResourceOptions(parent=parent))
    out: list[pulumi.Resource] = [gateway]
    for worker in workers:
        stack = next((s for s in vpn.workers if ko.worker_key(s) == worker.key), None)
        if stack is None:
            continue
        outputs = {k: worker.ref.require_output(k) for k in ("cloud", "project", "region", "clusterName")}
        network: Output[str] = Output.all(**outputs).apply(partial(_gcp_network, stack))
        gcp_provider = gcp.Provider(f"{name}-{worker.key}-vpn-gcp", project=outputs["project"],
                                    region=outputs["region"], opts=ResourceOptions(parent=parent))
        out.append(HaVpn(
            f"{name}-{worker.key}-vpn",
            HaVpnArgs(aws=AwsEnd(gateway_id=gateway.id, provider=aws_provider, asn=gateway.asn,
                                 tags=dict(cfg.tags)),
                      gcp=GcpEnd(project=outputs["project"], region=outputs["region"], network=network,
                                 provider=gcp_provider, asn=vpn.google_asn)),
            opts=ResourceOptions(parent=parent)))
    return out


def _check_workers(cfg: StackConfig) -> None:
    keys: list[str] = []
    for i, stack in enumerate(cfg.hub.workers):
        if stack.count("/") != 2:
            raise ConfigError(f"gpufleet:hub.workers[{i}]", f"{stack!r} must be a fully qualified org/project/stack")
        try:
            key = ko.worker_key(stack)
        except ValueError as exc:
            raise ConfigError(f"gpufleet:hub.workers[{i}]", str(exc)) from None
        if key in keys:
            raise ConfigError(f"gpufleet:hub.workers[{i}]", f"two workers share the stack name {key!r}")
        keys.append(key)
    if len(keys) > 20:
        raise ConfigError("gpufleet:hub.workers", "MultiKueueConfig takes at most 20 clusters")


def hub_provider(name: str) -> k8s.Provider:
    """The hub cluster's provider, with the options of every other gpufleet provider (server-side apply, adopting
    what exists: the JobSet CRD an earlier Helm install made). It reaches the cluster the default provider would:
    the stack's ``kubernetes:kubeconfig`` / ``context`` / ``cluster`` when set, else ``$KUBECONFIG`` or
    ``~/.kube/config``. Moving the hub's objects onto it replaces none of them (Pulumi CLI 3.151+ asks its
    DiffConfig, which sees the same cluster); it carries no identifier, since nothing in the hub stack knows the hub
    cluster's identity."""
    conf = pulumi.Config("kubernetes")
    given: dict[str, Any] = {"kubeconfig": conf.get_secret("kubeconfig"), "context": conf.get("context"),
                             "cluster": conf.get("cluster")}
    return k8s.Provider(f"{name}-k8s", **{k: v for k, v in given.items() if v is not None}, **k8s_provider_args())


def build_hub(cfg: StackConfig) -> None:
    """Build the hub stack and export its queues."""
    try:
        _check_workers(cfg)
    except ConfigError as exc:
        # RunError prints one line without a Python traceback in `pulumi up`.
        raise pulumi.RunError(f"invalid stack config: {exc}") from None
    hub = MultiKueueHub(cfg.cluster_name, MultiKueueHubArgs(cfg=cfg),
                        opts=pulumi.ResourceOptions(provider=hub_provider(cfg.cluster_name)))
    pulumi.export("role", "hub")
    pulumi.export("cloud", cfg.cloud)
    pulumi.export("region", cfg.region)
    pulumi.export("dispatcher", cfg.hub.dispatcher)
    pulumi.export("workers", {w.key: w.worker.apply(lambda wk: wk.cluster_name) for w in hub.workers})
    pulumi.export("kueue", {"clusterQueues": hub.cluster_queues, "localQueues": hub.local_queues})
    pulumi.export("egressCidrs", list(cfg.hub.egress_cidrs))
    # Read by each worker with gpufleet:cluster.hubStack (infra/hub_link.py).
    pulumi.export("vpnWorkers", hub.vpn_workers)
    pulumi.export("workerRanges", hub.worker_ranges)
    pulumi.export("workerCheckpoints", hub.worker_checkpoints)
    pulumi.export("reachability", hub.reachability)
    if hub.dispatcher is not None:
        built = hub.dispatcher_image
        pulumi.export("dispatch", {"deployment": dp.NAME, "namespace": dp.NAMESPACE,
                                   "replicas": cfg.hub.dispatch.replicas,
                                   "image": built.ref if built else cfg.hub.dispatch.image,
                                   "repository": built.repository if built else None,
                                   "metricsService": dp.METRICS_SERVICE, "fleetConfigMap": dp.FLEET_CONFIGMAP})

