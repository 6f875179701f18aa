"""Run the Pulumi program of one stack under Pulumi's mocks and collect what it registers.

No Pulumi CLI, no provider plugins, no cloud credentials: the program runs in-process with
``pulumi.runtime.set_mocks(..., preview=False)`` so every ``Output.apply`` really runs. Used by the
test suite and by ``scripts/preview``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

# Invoke results the program depends on, by function token. Anything else returns its inputs.
INVOKE_RESULTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "aws:index/getCallerIdentity:getCallerIdentity": lambda a: {
        "accountId": "123456789012", "arn": "arn:aws:iam::123456789012:user/mock", "userId": "MOCK", "id": "1"},
    "aws:index/getPartition:getPartition": lambda a: {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"},
    "aws:index/getRegion:getRegion": lambda a: {"name": "us-east-1", "region": "us-east-1", "id": "us-east-1"},
    "aws:iam/getPolicyDocument:getPolicyDocument": lambda a: {"json": json.dumps(_policy_json(a)), "id": "doc"},
    "aws:index/getAvailabilityZones:getAvailabilityZones": lambda a: _aws_zones(str(a.get("region") or "us-east-1")),
    "aws:ecr/getAuthorizationToken:getAuthorizationToken": lambda a: {
        "userName": "AWS", "password": "mock-ecr-password", "authorizationToken": "QVdTOm1vY2s=",
        "proxyEndpoint": "https://123456789012.dkr.ecr.us-east-1.amazonaws.com", "expiresAt": "", "id": "1"},
    # An existing virtual private gateway (gpufleet:hub.vpn.vpnGatewayId) as EC2 describes it.
    "aws:ec2/getVpnGateway:getVpnGateway": lambda a: {
        "id": a.get("id") or "vgw-0123456789abcdef0", "amazonSideAsn": "64512", "state": "available",
        "attachedVpcId": a.get("attachedVpcId") or "",
        "arn": f"arn:aws:ec2:us-east-1:123456789012:vpn-gateway/{a.get('id')}",
        "availabilityZone": "", "filters": [], "tags": {}},
    "gcp:organizations/getClientConfig:getClientConfig": lambda a: {"accessToken": "mock-token", "project": "p"},
    "gcp:organizations/getProject:getProject": lambda a: {"number": "123456789", "projectId": "p", "id": "p"},
    "gcp:storage/getProjectServiceAccount:getProjectServiceAccount": lambda a: {
        "emailAddress": "service-123456789@gs-project-accounts.iam.gserviceaccount.com",
        "member": "serviceAccount:service-123456789@gs-project-accounts.iam.gserviceaccount.com",
        "project": a.get("project", "p"), "id": "service-123456789"},
}


# Regular AZs per region as one account sees them: names are shuffled per account, zone IDs are not.
_AWS_AZS: dict[str, list[tuple[str, str]]] = {
    "us-east-1": [("us-east-1a", "use1-az1"), ("us-east-1b", "use1-az2"), ("us-east-1c", "use1-az4"),
                  ("us-east-1d", "use1-az6"), ("us-east-1e", "use1-az3"), ("us-east-1f", "use1-az5")],
    "us-west-2": [("us-west-2a", "usw2-az1"), ("us-west-2b", "usw2-az2"), ("us-west-2c", "usw2-az3"),
                  ("us-west-2d", "usw2-az4")],
}


def _aws_zones(region: str) -> dict[str, Any]:
    """A realistic aws.get_availability_zones answer (other regions: three AZs named after the region)."""
    from placement.model.zones import aws_zone_id_prefix

    azs = _AWS_AZS.get(region) or [(f"{region}{c}", f"{aws_zone_id_prefix(region)}-az{i}")
                                   for i, c in enumerate("abc", start=1)]
    return {"id": region, "names": [n for n, _ in azs], "zoneIds": [z for _, z in azs],
            "groupNames": [region] * len(azs), "allAvailabilityZones": False, "state": "available"}


# Outputs of the stacks a program reads through pulumi.StackReference, by fully qualified stack name
# (``org/project/stack``). Tests fill it; ``kubeconfig`` is reported as a secret output, as exported.
STACK_REFERENCE_OUTPUTS: dict[str, dict[str, Any]] = {}


# The directory of the stack file being run: a worker's hub (gpufleet:cluster.hubStack) is read from there.
_STACKS_DIR: list[str] = []


def _local_hub_outputs(target: str) -> dict[str, Any] | None:
    """What hub stack ``target`` (``org/project/<stack>``) exports that a worker reads (``role``, ``egressCidrs``,
    ``vpnWorkers``, ``workerRanges``), from ``Pulumi.<stack>.yaml`` beside the stack being run and the worker
    files there; None when that file is missing. A stack that is not a hub exports only its role."""
    from infra.config import ConfigError, load_stack_file
    from infra.config.stack import linked_ranges

    if not _STACKS_DIR:
        return None
    path = os.path.join(_STACKS_DIR[-1], f"Pulumi.{target.rsplit('/', 1)[-1]}.yaml")
    try:
        with open(path, encoding="utf-8") as fh:
            config = (yaml.safe_load(fh) or {}).get("config") or {}
    except OSError:
        return None
    if config.get("gpufleet:role") != "hub":
        return {"role": str(config.get("gpufleet:role") or "worker")}
    try:
        hub = load_stack_file(path)
    except ConfigError:
        return None
    ranges: dict[str, list[dict[str, str]]] = {}
    for ref in hub.hub.workers:
        stack = ref.rsplit("/", 1)[-1]
        worker_path = os.path.join(_STACKS_DIR[-1], f"Pulumi.{stack}.yaml")
        if os.path.exists(worker_path):
            try:
                worker = load_stack_file(worker_path)
            except ConfigError:
                continue
            ranges[stack] = [{"key": f"gpufleet:{k}", "cidr": c} for k, c in linked_ranges(worker)]
    vpn = [ref.rsplit("/", 1)[-1] for ref in (hub.hub.vpn.workers if hub.hub.vpn else ())]
    return {"role": "hub", "egressCidrs": list(hub.hub.egress_cidrs), "vpnWorkers": vpn, "workerRanges": ranges}


def _policy_json(args: dict[str, Any]) -> dict[str, Any]:
    """A faithful-enough rendering of aws.iam.get_policy_document so tests can read the statements."""
    statements = []
    for st in args.get("statements", []):
        out: dict[str, Any] = {"Effect": st.get("effect", "Allow")}
        if st.get("sid"):
            out["Sid"] = st["sid"]
        for key, name in (("actions", "Action"), ("resources", "Resource"), ("notActions", "NotAction")):
            if st.get(key):
                out[name] = st[key]
        for p in st.get("principals", []) or []:
            out.setdefault("Principal", {})[p["type"]] = p["identifiers"]
        for cond in st.get("conditions", []) or []:
            out.setdefault("Condition", {}).setdefault(cond["test"], {})[cond["variable"]] = cond["values"]
        statements.append(out)
    return {"Version": "2012-10-17", "Statement": statements}


@dataclass
class Registered:
    """One resource the program registered: its type token, name and (camelCase) inputs.

    ``urn`` is its URN and ``dependencies`` the URNs the engine was told it depends on (explicit
    ``depends_on``, with components expanded to their resources, plus the resources its inputs came from).
    """

    type: str
    name: str
    inputs: dict[str, Any]
    provider: str | None = None
    urn: str = ""
    dependencies: tuple[str, ...] = ()
    # Resource options the engine was given: a stateful resource is protected and retained (infra.protect).
    protect: bool = False
    retain_on_delete: bool = False


@dataclass
class RunResult:
    """Everything a mocked program run produced."""

    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)

    def of_type(self, type_token: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_token]

    def named(self, name: str) -> Registered:
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(name)

    def depends_on(self, resource: Registered, other: Registered) -> bool:
        """True when ``resource`` waits for ``other``, directly or through resources it depends on."""
        by_urn = {r.urn: r for r in self.resources}
        seen: set[str] = set()
        todo = list(resource.dependencies)
        while todo:
            urn = todo.pop()
            if urn == other.urn:
                return True
            if urn in seen:
                continue
            seen.add(urn)
            if urn in by_urn:
                todo.extend(by_urn[urn].dependencies)
        return False


def _mocks(result: RunResult) -> Any:
    import pulumi

    class RecordingMocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
            result.resources.append(Registered(args.typ, args.name, dict(args.inputs), args.provider))
            state = dict(args.inputs)
            state.setdefault("name", args.name)
            state.setdefault("arn", f"arn:mock:{args.typ}:{args.name}")
            if args.typ == "aws:eks/cluster:Cluster":
                state.setdefault("endpoint", f"https://{args.name}.eks.mock")
                state.setdefault("certificateAuthority", {"data": "bW9jaw=="})
                state.setdefault("identities", [{"oidcs": [{"issuer": f"https://oidc.eks.mock/id/{args.name}"}]}])
                # EKS creates the cluster security group; node launch templates attach it to their interfaces.
                state["vpcConfig"] = {"clusterSecurityGroupId": f"sg-{args.name}-cluster",
                                      **(state.get("vpcConfig") or {})}
            if args.typ == "aws:eks/nodeGroup:NodeGroup":
                # EKS creates one Auto Scaling group per managed node group; its name is computed.
                state.setdefault("resources", [{"autoscalingGroups": [{"name": f"eks-{args.name}-asg"}]}])
            if args.typ == "pulumi:pulumi:StackReference":
                target = str(args.inputs.get("name") or args.name)
                outputs = STACK_REFERENCE_OUTPUTS.get(target) or _local_hub_outputs(target)
                if outputs is None:
                    raise KeyError(f"no STACK_REFERENCE_OUTPUTS entry for stack {target!r}")
                # What a policy pack sees of a StackReference: its name and the outputs it read.
                result.resources[-1].inputs["outputs"] = outputs
                state = {"name": target, "outputs": outputs,
                         "secretOutputNames": [k for k in ("kubeconfig",) if k in outputs]}
                return target, state
            if (args.typ == "kubernetes:core/v1:Secret"
                    and args.inputs.get("type") == "kubernetes.io/service-account-token"):
                # The token controller fills in token and ca.crt (base64, as the API returns them).
                state["data"] = {"token": "bW9jay1zZXJ2aWNlLWFjY291bnQtdG9rZW4=", "ca.crt": "bW9jaw==",
                                 **(state.get("data") or {})}
            # Filesystem addresses the clouds compute; the checkpoint volumes are built from them.
            if args.typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
                state.setdefault("dnsName", f"{args.name}.fsx.mock.amazonaws.com")
                state.setdefault("mountName", "abcdefgh")
            if args.typ == "gcp:lustre/instance:Instance":
                state.setdefault("mountPoint", f"10.250.0.2@tcp:/{args.inputs.get('filesystem', 'fs')}")
            if args.typ == "gcp:filestore/instance:Instance":
                state["networks"] = [{**n, "ipAddresses": n.get("ipAddresses") or ["10.250.0.3"]}
                                     for n in state.get("networks") or [{}]]
            # Registries the hub creates and the digest a push returns (a fake one, stable per resource name).
            if args.typ == "aws:ecr/repository:Repository":
                state.setdefault("registryId", "123456789012")
                state.setdefault("repositoryUrl", f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{state['name']}")
            if args.typ == "gcp:artifactregistry/repository:Repository":
                state.setdefault("registryUri", f"{state.get('location')}-docker.pkg.dev/p/{state.get('repositoryId')}")
            # An HA VPN's two interface addresses and an AWS VPN connection's tunnels (outside addresses, inside
            # link-local /30 pairs, pre-shared keys), as the clouds assign them.
            if args.typ == "gcp:compute/haVpnGateway:HaVpnGateway":
                state.setdefault("vpnInterfaces", [{"id": i, "ipAddress": f"34.157.0.{i + 1}"} for i in range(2)])
            if args.typ == "aws:ec2/vpnConnection:VpnConnection":
                n = int(hashlib.sha256(args.name.encode()).hexdigest(), 16) % 60
                for t in (1, 2):
                    block = 4 * (2 * n + t)
                    state.setdefault(f"tunnel{t}Address", f"52.95.{n}.{t}")
                    state.setdefault(f"tunnel{t}CgwInsideAddress", f"169.254.{block // 256}.{block % 256 + 2}")
                    state.setdefault(f"tunnel{t}VgwInsideAddress", f"169.254.{block // 256}.{block % 256 + 1}")
                    state.setdefault(f"tunnel{t}PresharedKey", f"mock-psk-{n}-{t}")
            if args.typ == "docker-build:index:Image":
                state.setdefault("digest", "sha256:" + hashlib.sha256(args.name.encode()).hexdigest())
            if args.typ == "gcp:container/cluster:Cluster":
                # GKE reports the private endpoint's address while the public one is off, the public address
                # once it is on; the DNS endpoint is the same for the cluster's life.
                private = bool((args.inputs.get("privateClusterConfig") or {}).get("enablePrivateEndpoint"))
                state.setdefault("endpoint", "10.4.0.2" if private else "203.0.113.10")
                cpe = dict(state.get("controlPlaneEndpointsConfig") or {})
                cpe["dnsEndpointConfig"] = {
                    **(cpe.get("dnsEndpointConfig") or {}),
                    "endpoint": f"gke-{hashlib.sha256(args.name.encode()).hexdigest()[:32]}"
                                f".{args.inputs.get('location', 'us-central1')}.gke.goog"}
                state["controlPlaneEndpointsConfig"] = cpe
                state.setdefault("masterAuth", {"clusterCaCertificate": "bW9jaw=="})
            return f"{args.name}-id", state

        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
            fn = INVOKE_RESULTS.get(args.token)
            return (fn(dict(args.args)) if fn else dict(args.args)), []

    return RecordingMocks()


def _monitor(mocks: Any, recorded: dict[tuple[str, str], tuple[Any, ...]]) -> Any:
    """A mock monitor that also records each registration's URN and dependencies (the mocks do not see them)."""
    from pulumi.runtime.mocks import MockMonitor

    class RecordingMonitor(MockMonitor):
        def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - the gRPC method name
            response = super().RegisterResource(request)
            recorded[(request.type, request.name)] = (response.urn, tuple(request.dependencies),
                                                      bool(request.protect), bool(request.retainOnDelete))
            return response

    return RecordingMonitor(mocks)


def _config_from_stack_file(path: str) -> tuple[str, dict[str, str]]:
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    stack = os.path.basename(path).removeprefix("Pulumi.").removesuffix(".yaml")
    config = {}
    for key, value in (doc.get("config") or {}).items():
        config[key] = value if isinstance(value, str) else json.dumps(value)
    return stack, config


def run_stack(stack_file: str, program: Callable[[], Awaitable[None] | None] | None = None,
              config_override: dict[str, Any] | None = None) -> RunResult:
    """Run the gpufleet program for ``stacks/Pulumi.<stack>.yaml`` under mocks and return what it registered.

    ``config_override`` replaces top-level ``gpufleet:`` keys (values as Python objects), for tests of
    broken configs. Exceptions from the program (e.g. ``ConfigError``) propagate.
    """
    import pulumi
    from pulumi.runtime import config as runtime_config
    from pulumi.runtime import settings
    from pulumi.runtime.sync_await import _sync_await

    stack, config = _config_from_stack_file(stack_file)
    for key, value in (config_override or {}).items():
        full = key if ":" in key else f"gpufleet:{key}"
        if value is None:
            config.pop(full, None)
        else:
            config[full] = value if isinstance(value, str) else json.dumps(value)

    result = RunResult()
    exported: dict[str, Any] = {}
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pulumi_(aws|gcp|kubernetes).*")

    settings.reset_options()
    # A loop of its own per run. The previous run's loop is closed here, not when that run ended (a test may still
    # resolve its outputs): an unclosed loop keeps its selector's file descriptors, and a suite of mock runs would
    # pile them past what select() takes (1024).
    while _LOOPS:
        _close_loop(_LOOPS.pop())
    loop = asyncio.new_event_loop()
    _LOOPS.append(loop)
    asyncio.set_event_loop(loop)
    recorded: dict[tuple[str, str], tuple[Any, ...]] = {}
    mocks = _mocks(result)
    pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=stack, preview=False,
                             monitor=_monitor(mocks, recorded))
    runtime_config.set_all_config(config, [])

    if program is None:
        from infra.program import main as program

    real_export = pulumi.export

    def record_export(name: str, value: Any) -> None:
        exported[name] = value
        real_export(name, value)

    pulumi.export = record_export  # type: ignore[assignment]
    _STACKS_DIR.append(os.path.dirname(os.path.abspath(stack_file)))
    try:
        from pulumi.runtime.stack import run_pulumi_func

        _sync_await(run_pulumi_func(program))  # type: ignore[arg-type]
        for name, value in exported.items():
            out = pulumi.Output.from_input(value)
            result.outputs[name] = _sync_await(out.future())
            if _sync_await(out.is_secret()):
                result.secret_outputs.add(name)
        for r in result.resources:
            r.urn, r.dependencies, r.protect, r.retain_on_delete = recorded.get((r.type, r.name),
                                                                                ("", (), False, False))
    finally:
        pulumi.export = real_export  # type: ignore[assignment]
        _STACKS_DIR.pop()
    return result


_LOOPS: list[asyncio.AbstractEventLoop] = []  # the event loop of the last run_stack, closed by the next one


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close a finished run's event loop (its pending callbacks are the mocks' own, never awaited again)."""
    if loop.is_closed() or loop.is_running():
        return
    try:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(loop.shutdown_asyncgens())
    except Exception:  # noqa: BLE001 - a loop that cannot wind down is still closed below
        pass
    finally:
        loop.close()
