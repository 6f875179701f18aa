"""``placement submit``: choosing an existing cluster from stack outputs, the manifest it renders, and applying
it through the Kubernetes Python client against a local fake API server.

Stack outputs are built from the real ``stacks/Pulumi.*.yaml`` with the same helpers the stacks export
them with (``infra.outputs.node_pool_output``, ``infra.k8s.kueue_objects``, ``infra.gcp.plan``), so these
tests follow the stack files.
"""

from __future__ import annotations

import json
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonhttp import JsonHandler

from infra.config import StackConfig, load_stack_file
from infra.gcp.plan import plan_gpu_networks
from infra.k8s import kueue_objects as ko
from infra.outputs import node_pool_output, training_service_account_output
from placement.commands.main import main
from placement.fleet import manifests
from placement.model import gpudirect
from placement.model.catalog import embedded_catalog
from placement.model.jobspec import parse_job
from placement.model.shapes import shape_book
from placement.plan.job import candidates

STACKS = Path(__file__).resolve().parents[3] / "stacks"
WORKERS = ("aws-use1-p5", "aws-usw2-p4d", "gcp-usc1-a3mega", "gcp-euw4-a3high")
FSX = {"kind": "fsx", "id": "fs-0abc1234def567890", "dnsName": "fs-0abc1234def567890.fsx.us-east-1.amazonaws.com",
       "mountName": "x7yz9bmv", "path": "/checkpoints", "capacityGb": 2400}


def cfg_of(stack: str) -> StackConfig:
    return load_stack_file(str(STACKS / f"Pulumi.{stack}.yaml"))


def outputs(stack: str, kubeconfig: Any = "[secret]") -> dict[str, Any]:
    """What `pulumi stack output --json --show-secrets` prints for a worker stack (fake IDs for cloud objects)."""
    cfg = cfg_of(stack)
    out: dict[str, Any] = {
        "cloud": cfg.cloud, "region": cfg.region, "clusterName": cfg.cluster_name, "kubeconfig": kubeconfig,
        "nodePools": [node_pool_output(p) for p in cfg.node_pools],
        "trainingServiceAccount": training_service_account_output(cfg),
        "kueue": {"clusterQueue": ko.cluster_queue_name(cfg),
                  "localQueues": [{"namespace": q["metadata"]["namespace"], "name": q["metadata"]["name"]}
                                  for q in ko.local_queues(cfg)]},
    }
    if cfg.cloud == "aws":
        out["checkpointUri"] = f"s3://{cfg.cluster_name}-123456789012/{cfg.checkpoint.prefix}"
        out["checkpointFilesystem"] = (dict(FSX, path=f"/{cfg.checkpoint.prefix}", zone=cfg.gpu_zone)
                                       if cfg.checkpoint.filesystem.kind == "fsx" else None)
    else:
        out["checkpointUri"] = f"gs://{cfg.project}-{cfg.cluster_name}-ckpt/{cfg.checkpoint.prefix}"
        out["checkpointFilesystem"] = None
        plan = plan_gpu_networks(cfg)
        out["gpuNetworks"] = {p.name: [s.gke_name for _, s in plan.attachments(p)] for p in cfg.node_pools}
    return out


def hub_outputs(dispatcher: str = "AllAtOnce") -> dict[str, Any]:
    hub = cfg_of("hub")
    keys = [ko.worker_key(w) for w in hub.hub.workers]
    names = {k: cfg_of(k).cluster_name for k in keys}
    queues = [{"namespace": t, "name": ko.local_queue_name(n, t)} for n in names.values() for t in hub.kueue.teams]
    queues += [{"namespace": t, "name": ko.ALL_WORKERS} for t in hub.kueue.teams]
    return {"role": "hub", "cloud": hub.cloud, "region": hub.region, "dispatcher": dispatcher, "workers": names,
            "kueue": {"clusterQueues": [*(ko.cluster_queue_name(n) for n in names.values()), ko.ALL_WORKERS],
                      "localQueues": queues}}


def write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# The trainer contract's command: the launcher around torchrun (submit warns about any other).
COMMAND = ["python", "-m", "placement.trainer.launch", "--", "torchrun", "train.py"]


def job_file(tmp_path: Path, **fields: Any) -> tuple[str, dict[str, Any]]:
    doc: dict[str, Any] = {"name": "llm-ft", "accelerator": "H100", "gpus": 16, "hours": 24, "priority": "burst",
                           "team": "team-a", "command": COMMAND}
    doc.update(fields)
    return write(tmp_path, "job.yaml", yaml.safe_dump(doc)), doc


def expected_pool(job_doc: dict[str, Any], stacks: tuple[str, ...]) -> tuple[str, str, int]:
    """(stack, pool, nodes) of the cheapest existing pool, straight from the stack configs and the catalog."""
    job = parse_job(job_doc)
    offers = embedded_catalog().offers
    best: tuple[tuple[float, float], str, str, int] | None = None
    for name in stacks:
        cfg = cfg_of(name)
        for pool in cfg.node_pools:
            here = [o for o in offers if o.cloud == cfg.cloud and o.region == cfg.region and o.zone == pool.zone
                    and o.instance_type == pool.shape.name]
            for c in candidates(job, here):
                if c.capacity != pool.capacity_kind or c.excluded or c.nodes > pool.max_nodes:
                    continue
                key = (round(c.cost.total_usd, 6), c.usd_per_hour)
                if best is None or key < best[0]:
                    best = (key, name, pool.name, c.nodes)
    assert best is not None
    return best[1], best[2], best[3]


def pod_of(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return obj["spec"]["template"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# ----------------------------------------------------------------------------- dry run


def test_multi_node_aws_renders_jobset_with_efa_fsx_and_queue(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.json", {s: outputs(s) for s in WORKERS})
    job, doc = job_file(tmp_path, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 0, err
    stack, pool, nodes = expected_pool(doc, WORKERS)
    cfg = cfg_of(stack)
    assert stack == "aws-use1-p5" and nodes == 2  # the only H100 AWS stack; 16 GPUs on 8-GPU nodes
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == ["PersistentVolume", "PersistentVolumeClaim", "JobSet"]
    pv, pvc, js = docs
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert js["metadata"]["namespace"] == "team-a"
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ko.local_queue_name(cfg, "team-a")
    assert js["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "burst"
    assert js["spec"]["suspend"] is True
    rj = js["spec"]["replicatedJobs"][0]
    assert rj["replicas"] == 1 and rj["template"]["spec"]["parallelism"] == nodes
    assert rj["template"]["spec"]["completions"] == nodes
    assert rj["template"]["spec"]["completionMode"] == "Indexed"
    pod = pod_of(js)
    pool_cfg = next(p for p in cfg.node_pools if p.name == pool)
    sched = ko.pool_scheduling(pool_cfg)
    assert pod["spec"]["nodeSelector"] == sched["nodeSelector"]
    assert pod["spec"]["tolerations"] == sched["tolerations"]
    # The stack creates the training service account in every team namespace: used, and no warning.
    assert pod["spec"]["serviceAccountName"] == cfg.training.service_account
    assert "team-a" in outputs(stack)["trainingServiceAccount"]["namespaces"]
    # The stack's pools scale from zero, so their flavors carry no Topology and the job asks for none.
    assert pool_cfg.min_nodes == 0 and not ko.uses_topology(pool_cfg)
    assert manifests.PREFERRED_TOPOLOGY not in pod["metadata"].get("annotations", {})
    (container,) = pod["spec"]["containers"]
    assert container["command"] == COMMAND
    res = container["resources"]
    p5 = shape_book().get("p5.48xlarge")
    assert p5 is not None and p5.fabric_nics == 32
    # EFA pods take the 2 MiB huge pages libfabric needs; huge page requests equal their limits.
    assert res["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "5120Mi"}
    assert res["requests"]["nvidia.com/gpu"] == "8" and res["requests"]["vpc.amazonaws.com/efa"] == "32"
    assert res["requests"]["hugepages-2Mi"] == "5120Mi"
    env = env_of(container)
    assert env["GPUFLEET_JOB"] == "llm-ft"
    assert env["CHECKPOINT_URI"] == outputs(stack)["checkpointUri"]
    assert env["CHECKPOINT_DIR"] == "/checkpoints"
    assert env["MASTER_ADDR"] == "llm-ft-node-0-0.llm-ft" and env["NNODES"] == "2" and env["NPROC_PER_NODE"] == "8"
    assert env["NODE_RANK"] == {"fieldRef": {"fieldPath":
                                             "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    # FSx for Lustre through a static PV bound to the namespace's PVC, mounted at the DRA path.
    assert pv["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
    assert pv["spec"]["csi"]["volumeHandle"] == FSX["id"]
    assert pv["spec"]["csi"]["volumeAttributes"] == {"dnsname": FSX["dnsName"], "mountname": FSX["mountName"]}
    assert pv["spec"]["claimRef"] == {"namespace": "team-a", "name": pvc["metadata"]["name"]}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["metadata"]["namespace"] == "team-a"
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
    assert vol["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "checkpoints")
    assert mount == {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": cfg.checkpoint.prefix}
    # The table goes to stderr, so stdout is the manifest only.
    assert "aws-use1-p5/" in err and "chosen: aws-use1-p5" in err
    assert "warning:" not in err


def _aws_p5(min_nodes: Any = None, **changes: Any) -> dict[str, Any]:
    """aws-use1-p5's outputs with every pool's minNodes set (``"max"``: fixed size; ``None``: not exported)."""
    doc = outputs("aws-use1-p5")
    for pool in doc["nodePools"]:
        if min_nodes is None:
            del pool["minNodes"]
        else:
            pool["minNodes"] = pool["maxNodes"] if min_nodes == "max" else min_nodes
    doc.update(changes)
    return doc


@pytest.mark.parametrize("min_nodes, wants", [("max", True), (1, False), (0, False), (None, False)])
def test_topology_annotation_only_on_pools_whose_flavor_has_the_topology(tmp_path, capsys, min_nodes, wants):
    doc = _aws_p5(min_nodes)
    job, _ = job_file(tmp_path, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", {"aws-use1-p5": doc}),
                         "--dry-run")
    assert code == 0, err
    js = list(yaml.safe_load_all(out))[-1]
    pool = next(p for p in doc["nodePools"] if p["name"] == js["metadata"]["annotations"]["gpufleet.io/pool"])
    shape = shape_book().get(pool["instanceType"])
    assert shape is not None
    # The same rule as the worker's ResourceFlavor (kueue_objects.tas_enabled), from the exported pool.
    assert ko.tas_enabled(pool.get("minNodes", 0), pool["maxNodes"], shape) is wants
    annotations = pod_of(js)["metadata"].get("annotations", {})
    # The narrowest network level (EC2 layer 3 on p5), not the widest.
    assert (annotations.get(manifests.PREFERRED_TOPOLOGY) == "topology.k8s.aws/network-node-layer-3") is wants
    assert (manifests.PREFERRED_TOPOLOGY in annotations) is wants


@pytest.mark.parametrize("account, warned", [
    ({"name": "trainer", "namespaces": ["team-a", "team-b"]}, None),
    ({"name": "trainer", "namespaces": ["team-b"]}, "no training service account trainer in team-a"),
    ({"namespace": "training", "name": "trainer"}, "no training service account trainer in team-a"),  # older form
    (None, "exports no trainingServiceAccount"),
])
def test_service_account_warning_only_outside_its_namespaces(tmp_path, capsys, account, warned):
    doc = _aws_p5(0, trainingServiceAccount=account)
    job, _ = job_file(tmp_path, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", {"aws-use1-p5": doc}),
                         "--dry-run", "--json")
    assert code == 0, err
    result = json.loads(out)
    pod = pod_of(result["manifest"][-1])
    assert pod["spec"].get("serviceAccountName") == (account["name"] if account else None)
    if warned is None:
        assert result["warnings"] == []
    else:
        assert [w for w in result["warnings"] if warned in w], result["warnings"]


def test_single_node_renders_a_job_asking_only_for_the_gpus_it_needs(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.json", {"aws-use1-p5": outputs("aws-use1-p5"),
                                              "aws-usw2-p4d": outputs("aws-usw2-p4d")})
    job, _ = job_file(tmp_path, accelerator="A100", gpus=4, team=None, priority="low")
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 0, err
    (obj,) = yaml.safe_load_all(out)  # p4d stack: no FSx, so no PV/PVC
    assert obj["apiVersion"] == "batch/v1" and obj["kind"] == "Job"
    cfg = cfg_of("aws-usw2-p4d")
    assert obj["metadata"]["namespace"] == cfg.kueue.teams[0]  # no team: the cluster's first queue namespace
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ko.cluster_queue_name(cfg)
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    (container,) = pod_of(obj)["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}  # one node: no EFA, half the node's GPUs
    env = env_of(container)
    assert env["NNODES"] == "1" and env["NODE_RANK"] == "0" and env["NPROC_PER_NODE"] == "4"
    assert env["CHECKPOINT_URI"].startswith("s3://") and "CHECKPOINT_DIR" not in env  # IRSA, no mount
    assert [v["name"] for v in pod_of(obj)["spec"]["volumes"]] == ["dshm"]


def test_gke_a3mega_gets_gpudirect_tcpxo_networks_and_gcs_fuse(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.json", {"gcp-usc1-a3mega": outputs("gcp-usc1-a3mega")})
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 0, err
    (js,) = yaml.safe_load_all(out)
    assert js["kind"] == "JobSet"
    pod = pod_of(js)
    ann = pod["metadata"]["annotations"]
    exported = outputs("gcp-usc1-a3mega")["gpuNetworks"][pod["spec"]["nodeSelector"][ko.POOL_LABEL]]
    mega = shape_book().get("a3-megagpu-8g")
    assert mega is not None and len(exported) == mega.gpu_vpcs == 8
    assert ann["networking.gke.io/default-interface"] == "eth0"
    interfaces = json.loads(ann["networking.gke.io/interfaces"])
    assert interfaces[0] == {"interfaceName": "eth0", "network": "default"}
    assert [i["network"] for i in interfaces[1:]] == exported == [f"vpc{i}" for i in range(1, 9)]
    assert [i["interfaceName"] for i in interfaces[1:]] == [f"eth{i}" for i in range(1, 9)]
    # TCPXO: the RxDM daemon as a native sidecar, given the GPUs through the NRI device annotation.
    (daemon,) = pod["spec"]["initContainers"]
    assert daemon["name"] == "tcpxo-daemon" and daemon["restartPolicy"] == "Always"
    devices = yaml.safe_load(ann["devices.gke.io/container.tcpxo-daemon"])
    assert {"path": "/dev/nvidia7"} in devices and {"path": "/dev/dmabuf_import_helper"} in devices
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    env = env_of(container)
    assert env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == "/dev/aperture_devices"
    # The RxDM daemon paired with the pinned installer, and Google's NCCL env sourced before the user's command.
    tcpxo = gpudirect.fabric("tcpxo")
    assert daemon["image"] == tcpxo.rxdm_image
    assert env["NCCL_LIB_DIR"] == "/usr/local/nvidia/lib64" == env["LD_LIBRARY_PATH"]
    shell, flag, prelude, argv0, *user = container["command"]
    assert (shell, flag, argv0, user) == ("/bin/bash", "-c", "trainer", COMMAND)
    assert prelude.startswith('source "/usr/local/nvidia/lib64/nccl-env-profile.sh" && ')
    assert prelude.endswith('exec "$@"')
    # Checkpoints: the bucket through the GCS FUSE CSI driver (Workload Identity), at the stack's prefix.
    assert ann["gke-gcsfuse/volumes"] == "true"
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
    bucket_uri = outputs("gcp-usc1-a3mega")["checkpointUri"]
    assert vol["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
    assert f"gs://{vol['csi']['volumeAttributes']['bucketName']}/checkpoints" == bucket_uri
    assert "only-dir=checkpoints" in vol["csi"]["volumeAttributes"]["mountOptions"]
    assert env["CHECKPOINT_URI"] == bucket_uri and env["CHECKPOINT_DIR"] == "/checkpoints"


def test_gke_a4_rdma_pod_sources_set_nccl_env_before_the_command(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.json", {"gcp-use4-a4": outputs("gcp-use4-a4")})
    job, _ = job_file(tmp_path, accelerator="B200", gpus=16)
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--json")
    assert code == 0, err
    result = json.loads(out)
    pod = pod_of(result["manifest"][-1])
    assert "initContainers" not in pod["spec"]  # gIB: no RxDM daemon
    interfaces = json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert [i["network"] for i in interfaces[1:]] == ["gvnic-1", *(f"rdma-{i}" for i in range(8))]
    (container,) = pod["spec"]["containers"]
    env = env_of(container)
    rdma = gpudirect.fabric("rdma")
    assert env["NCCL_LIB_DIR"] == rdma.nccl_lib_dir == "/usr/local/nvidia/lib64"
    assert container["command"] == ["/bin/bash", "-c", 'source "/usr/local/gib/scripts/set_nccl_env.sh" && exec "$@"',
                                    "trainer", *COMMAND]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/usr/local/gib", "/usr/local/nvidia"} <= mounts  # where the script and NCCL_LIB_DIR live
    assert not [w for w in result["warnings"] if "no command" in w]


def test_gpudirect_job_without_a_command_keeps_the_entrypoint_and_warns(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.json", {"gcp-usc1-a3mega": outputs("gcp-usc1-a3mega")})
    job, _ = job_file(tmp_path, command=[])
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--json")
    assert code == 0, err
    result = json.loads(out)
    (container,) = pod_of(result["manifest"][-1])["spec"]["containers"]
    assert "command" not in container  # the image's entrypoint runs
    assert env_of(container)["NCCL_LIB_DIR"] == "/usr/local/nvidia/lib64"
    assert [w for w in result["warnings"] if "nccl-env-profile.sh" in w]


def test_json_chooses_the_cheapest_existing_cluster(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.yaml", yaml.safe_dump({s: outputs(s) for s in WORKERS}))
    job, doc = job_file(tmp_path, accelerator=["H100", "A100"], gpus=16, team=None,
                        data={"dataset": {"uri": "gs://d/x", "size_gb": 4000, "region": "europe-west4"}})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["schema"] == "gpufleet.placement/v1" and result["kind"] == "submit"
    stack, pool, nodes = expected_pool(doc, WORKERS)
    chosen = result["chosen"]
    assert (chosen["stack"], chosen["pool"], chosen["nodes"]) == (stack, pool, nodes)
    assert chosen["queue"] == ko.cluster_queue_name(cfg_of(stack))
    assert chosen["existing_cluster"] == {"stack": stack, "pool": pool}
    manifest = result["manifest"]
    assert manifest[-1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == chosen["queue"]
    # Every candidate says whether a stack holds it; pools named must really match the offer.
    pools = {(s, p["name"]): (outputs(s)["region"], p) for s in WORKERS for p in outputs(s)["nodePools"]}
    assert any(c["existing_cluster"] is None for c in result["candidates"])
    for c in result["candidates"]:
        assert "existing_cluster" in c
        if c["existing_cluster"]:
            region, p = pools[(c["existing_cluster"]["stack"], c["existing_cluster"]["pool"])]
            assert (c["region"], c["zone"], c["instance_type"], c["capacity"]) == (
                region, p["zone"], p["instanceType"], p["capacity"])
            assert c["nodes"] <= p["maxNodes"]
            assert c["cost"]["total_usd"] >= chosen["cost"]["total_usd"] - 1e-6


def _second_p5(fsx: bool) -> dict[str, Any]:
    """A second AWS H100 worker (us-east-2), with or without FSx, as another stack would export it."""
    doc = outputs("aws-use1-p5")
    doc.update(region="us-east-2", clusterName="gpufleet-aws-use2-p5",
               checkpointUri="s3://gpufleet-aws-use2-p5-123456789012/checkpoints")
    for pool in doc["nodePools"]:
        pool["zone"] = "use2-az3"
    doc["checkpointFilesystem"] = dict(FSX, id="fs-0second", dnsName="fs-0second.fsx.us-east-2.amazonaws.com",
                                       path="/checkpoints", zone="use2-az3") if fsx else None
    return doc


def _hub_with(extra: dict[str, str]) -> dict[str, Any]:
    hub = hub_outputs("External")
    hub["workers"].update(extra)
    return hub


def test_via_hub_renders_one_portable_job_for_the_efa_group(tmp_path, capsys):
    docs = {s: outputs(s) for s in WORKERS}
    docs["aws-use2-p5"] = _second_p5(fsx=False)
    docs["hub"] = _hub_with({"aws-use2-p5": "gpufleet-aws-use2-p5"})
    job, job_doc = job_file(tmp_path, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", docs), "--dry-run", "--json",
                         "--via-hub")
    assert code == 0, err
    result = json.loads(out)
    chosen = result["chosen"]
    assert chosen["queue"] == ko.ALL_WORKERS and chosen["via_hub"] is True
    group = chosen["group"]
    # 16 GPUs over 2 EFA nodes: only AWS workers with 8-GPU EFA H100 pools belong; A100 and GKE do not.
    assert group["name"] == "efa" and group["nodes"] == 2 and group["gpus_per_node"] == 8
    assert group["workers"][0] == chosen["stack"] and sorted(group["workers"]) == ["aws-use1-p5", "aws-use2-p5"]
    assert {e.split(":")[0] for e in group["excluded"]} == {"aws-usw2-p4d", "gcp-usc1-a3mega", "gcp-euw4-a3high"}
    js = result["manifest"][-1]
    assert js["kind"] == "JobSet" and js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ko.ALL_WORKERS
    ann = js["metadata"]["annotations"]
    assert json.loads(ann[manifests.JOB_SPEC_ANNOTATION]) == job_doc
    assert ann[manifests.GROUP_ANNOTATION] == "efa"
    assert ann[manifests.WORKERS_ANNOTATION].split(",") == group["workers"]
    # The job's price of waiting travels in its spec (usd_per_hour_of_delay), not in an annotation of its own.
    assert set(ann) == {"gpufleet.io/placement", manifests.JOB_SPEC_ANNOTATION, manifests.GROUP_ANNOTATION,
                        manifests.WORKERS_ANNOTATION, "gpufleet.io/checkpoint-home", "gpufleet.io/checkpoint-region"}
    pod = pod_of(js)
    assert "nodeSelector" not in pod["spec"]  # the admitting worker's flavor picks the pool
    (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    # The group's pools, instance types and fabric: what every worker flavor names (pool names repeat across clouds).
    assert term["matchExpressions"] == [
        {"key": ko.POOL_LABEL, "operator": "In", "values": sorted(p["name"] for p in docs["aws-use1-p5"]["nodePools"])},
        {"key": "node.kubernetes.io/instance-type", "operator": "In",
         "values": sorted({p["instanceType"] for p in docs["aws-use1-p5"]["nodePools"]})},
        {"key": "gpufleet.io/fabric", "operator": "In", "values": ["efa"]}]
    assert manifests.PREFERRED_TOPOLOGY not in pod["metadata"].get("annotations", {})  # hub flavors: no TAS
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32",
                                                "hugepages-2Mi": "5120Mi"}
    # One worker has FSx and the other only S3: nothing is mounted; each worker's ConfigMap names its bucket.
    env = env_of(container)
    assert "CHECKPOINT_URI" not in env and "CHECKPOINT_DIR" not in env and env["FI_PROVIDER"] == "efa"
    assert container["envFrom"] == [{"configMapRef": {"name": "gpufleet-checkpoint", "optional": True}}]
    assert "checkpoints" not in [v["name"] for v in pod["spec"]["volumes"]]
    storage = result["manifest"][:-1]
    assert [(d["kind"], d["metadata"]["annotations"][manifests.CLUSTER_ANNOTATION]) for d in storage] == [
        ("ConfigMap", w) for w in group["workers"]]
    assert {d["metadata"]["annotations"][manifests.CLUSTER_ANNOTATION]: d["data"]["CHECKPOINT_URI"]
            for d in storage} == {w: docs[w]["checkpointUri"] for w in group["workers"]}
    assert any("CHECKPOINT_URI" in w for w in result["warnings"])


def test_via_hub_mounts_checkpoints_when_every_worker_of_the_group_has_fsx(tmp_path, capsys):
    docs = {"aws-use1-p5": outputs("aws-use1-p5"), "aws-use2-p5": _second_p5(fsx=True),
            "hub": _hub_with({"aws-use2-p5": "gpufleet-aws-use2-p5"})}
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", docs), "--dry-run", "--json",
                         "--via-hub")
    assert code == 0, err
    result = json.loads(out)
    pod = pod_of(result["manifest"][-1])
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "checkpoints")
    assert mount == {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": "checkpoints"}
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
    assert vol == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "gpufleet-checkpoints"}}
    by_worker: dict[str, list[str]] = {}
    for d in result["manifest"][:-1]:
        by_worker.setdefault(d["metadata"]["annotations"][manifests.CLUSTER_ANNOTATION], []).append(d["kind"])
        if d["kind"] == "PersistentVolume":
            fs = docs[d["metadata"]["annotations"][manifests.CLUSTER_ANNOTATION]]["checkpointFilesystem"]
            assert d["spec"]["csi"]["volumeHandle"] == fs["id"]  # each worker mounts its own file system
    assert by_worker == {w: ["ConfigMap", "PersistentVolume", "PersistentVolumeClaim"]
                         for w in ("aws-use1-p5", "aws-use2-p5")}


def test_stack_made_claim_is_mounted_by_name_and_submit_creates_no_volume(tmp_path, capsys):
    doc = outputs("aws-use1-p5")
    doc["checkpointFilesystem"]["claimName"] = "gpufleet-checkpoints"
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", {"aws-use1-p5": doc}),
                         "--dry-run")
    assert code == 0, err
    (js,) = yaml.safe_load_all(out)  # no PersistentVolume: users need no cluster-wide rights to submit
    pod = pod_of(js)
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
    assert vol == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "gpufleet-checkpoints"}}
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "checkpoints")
    assert mount["subPath"] == "checkpoints"  # the data-repository path, so files reach the bucket


def test_gke_filesystem_claim_replaces_the_bucket_mount(tmp_path, capsys):
    doc = outputs("gcp-usc1-a3mega")
    doc["checkpointFilesystem"] = {"kind": "lustre", "zone": "us-central1-a", "instance": "c-ckpt",
                                   "filesystem": "ckpt", "mountPoint": "10.9.0.4@tcp:/ckpt", "capacityGb": 18000,
                                   "claimName": "gpufleet-checkpoints"}
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", {"gcp-usc1-a3mega": doc}),
                         "--dry-run")
    assert code == 0, err
    (js,) = yaml.safe_load_all(out)
    pod = pod_of(js)
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
    assert vol == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "gpufleet-checkpoints"}}
    assert "gke-gcsfuse/volumes" not in pod["metadata"].get("annotations", {})
    mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "checkpoints")
    assert mount == {"name": "checkpoints", "mountPath": "/checkpoints"}
    assert "warning:" not in err


def test_via_hub_mounts_the_stack_made_claims_and_creates_only_config_maps(tmp_path, capsys):
    docs = {"aws-use1-p5": outputs("aws-use1-p5"), "aws-use2-p5": _second_p5(fsx=True),
            "hub": _hub_with({"aws-use2-p5": "gpufleet-aws-use2-p5"})}
    for key in ("aws-use1-p5", "aws-use2-p5"):
        docs[key]["checkpointFilesystem"]["claimName"] = "gpufleet-checkpoints"
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", docs), "--dry-run", "--json",
                         "--via-hub")
    assert code == 0, err
    result = json.loads(out)
    pod = pod_of(result["manifest"][-1])
    vol = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
    assert vol == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "gpufleet-checkpoints"}}
    assert [d["kind"] for d in result["manifest"][:-1]] == ["ConfigMap", "ConfigMap"]


def test_via_hub_single_node_group_spans_clouds_and_gke_fabrics_stay_apart(tmp_path, capsys):
    docs = {s: outputs(s) for s in WORKERS}
    docs["hub"] = hub_outputs("External")
    stacks = write(tmp_path, "s.json", docs)
    job, _ = job_file(tmp_path, gpus=8)
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--json", "--via-hub")
    assert code == 0, err
    group = json.loads(out)["chosen"]["group"]
    assert group["name"] == "single-node" and group["nodes"] == 1
    assert sorted(group["workers"]) == ["aws-use1-p5", "gcp-euw4-a3high", "gcp-usc1-a3mega"]  # every H100 worker
    job, _ = job_file(tmp_path, clouds={"allow": ["gcp"]})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--json", "--via-hub")
    assert code == 0, err
    result = json.loads(out)
    group = result["chosen"]["group"]
    shape = shape_book().get(result["chosen"]["instance_type"])
    assert shape is not None and group["name"] == shape.fabric in ("tcpx", "tcpxo")
    # A3 High (TCPX) and A3 Mega (TCPXO) pods differ (sidecar, networks): one group never holds both.
    assert group["workers"] == [result["chosen"]["stack"]]
    pod = pod_of(result["manifest"][-1])
    assert json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])[1:]
    assert [d["kind"] for d in result["manifest"][:-1]] == ["ConfigMap", "PersistentVolume", "PersistentVolumeClaim"]
    pv = result["manifest"][1]
    assert pv["spec"]["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"  # GKE: the bucket as a static volume
    assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"


def test_via_hub_needs_the_all_workers_queue_on_the_hub(tmp_path, capsys):
    docs = {s: outputs(s) for s in WORKERS}
    docs["hub"] = hub_outputs()
    stacks = write(tmp_path, "stacks.json", docs)
    # team-b has queues on the workers but not on the hub: no existing cluster through the hub.
    job_b, _ = job_file(tmp_path, clouds={"allow": ["aws"]}, team="team-b")
    code, out, err = run(capsys, "submit", job_b, "--stacks", stacks, "--dry-run", "--via-hub")
    assert code == 1 and out == ""
    assert "hub hub has no LocalQueue all-workers in team-b" in err
    job, _ = job_file(tmp_path, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--via-hub")
    assert code == 0 and "uses the AllAtOnce dispatcher" in err
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--via-hub",
                         "--wait-usd-per-gpu-hour", "2")  # removed: the job spec's usd_per_hour_of_delay says it
    assert code == 2 and "--wait-usd-per-gpu-hour" in err and len(err.strip().splitlines()) == 1


def test_job_no_stack_can_hold_exits_1(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.json", {s: outputs(s) for s in WORKERS})
    cfg = cfg_of("aws-use1-p5")
    biggest = max(p.max_nodes for p in cfg.node_pools)
    job, _ = job_file(tmp_path, gpus=8 * (biggest + 1), clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 1 and out == ""
    assert f"maxNodes {biggest} < {biggest + 1} nodes needed" in err
    assert "needs a new stack" in err  # the table still shows where a new stack could run it
    job, _ = job_file(tmp_path, accelerator="B200", gpus=8)
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--json", "--dry-run")
    assert code == 1
    assert json.loads(out)["chosen"] is None
    assert err.strip().splitlines()[-1].endswith("no stack has a B200 node pool")


@pytest.mark.parametrize("content, needle", [
    ("[1, 2]", "--stacks"),
    ("{not yaml: [", "not valid YAML"),
    (json.dumps({"s": {"cloud": "aws", "region": "us-east-1", "clusterName": "c"}}), "s.nodePools"),
    (json.dumps({"s": {"cloud": "aws", "region": "us-east-1", "clusterName": "c",
                       "nodePools": [{"name": "p", "instanceType": "p5.48xlarge", "capacity": "spot",
                                      "zone": "use1-az6", "maxNodes": "four"}]}}), "s.nodePools[0].maxNodes"),
    (json.dumps({"s": {"cloud": "aws", "region": "us-east-1", "clusterName": "c",
                       "nodePools": [{"name": "p", "instanceType": "p5.48xlarge", "capacity": "spot",
                                      "zone": "use1-az6", "maxNodes": 4, "minNodes": -1}]}}),
     "s.nodePools[0].minNodes"),
    (json.dumps({"s": {"cloud": "aws", "region": "us-east-1", "clusterName": "c", "nodePools": [],
                       "trainingServiceAccount": {"name": "trainer", "namespaces": "team-a"}}}),
     "s.trainingServiceAccount.namespaces"),
    (json.dumps({"s": {"cloud": "azure", "region": "x", "clusterName": "c", "nodePools": []}}), "s.cloud"),
    # issue 14: non-finite node counts (JSON's Infinity, YAML's .inf), duplicate keys, alias bombs
    (json.dumps({"s": {"cloud": "aws", "region": "us-east-1", "clusterName": "c",
                       "nodePools": [{"name": "p", "instanceType": "p5.48xlarge", "capacity": "spot",
                                      "zone": "use1-az6", "maxNodes": float("inf")}]}}), "s.nodePools[0].maxNodes"),
    ("s: {cloud: aws, region: us-east-1, clusterName: c, nodePools: [{name: p, instanceType: p5.48xlarge, "
     "capacity: spot, zone: use1-az6, maxNodes: .nan}]}", "s.nodePools[0].maxNodes"),
    ("s: {cloud: aws, cloud: gcp}", "given twice"),
    ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n"
                                                        for i in range(1, 8)), "expands to more than"),
])
def test_bad_stacks_file_exits_2_with_one_line(tmp_path, capsys, content, needle):
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "bad.json", content), "--dry-run")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


def test_missing_stacks_flag_and_missing_file_exit_2(tmp_path, capsys):
    job, _ = job_file(tmp_path)
    code, _, err = run(capsys, "submit", job, "--dry-run")
    assert code == 2 and "--stacks" in err
    code, _, err = run(capsys, "submit", job, "--stacks", str(tmp_path / "nope.json"), "--dry-run")
    assert code == 2 and "not found" in err


def fake_pulumi(tmp_path: Path, docs: dict[str, Any]) -> Path:
    """A `pulumi` on PATH that prints the outputs of the stack named after --stack."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    data = tmp_path / "outputs.json"
    data.write_text(json.dumps(docs))
    script = bindir / "pulumi"
    script.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
assert args[:2] == ["stack", "output"] and "--json" in args and "--show-secrets" in args, args
name = args[args.index("--stack") + 1]
docs = json.load(open({str(data)!r}))
if name not in docs:
    sys.stderr.write("error: no stack named '" + name + "' found\\n")
    sys.exit(255)
print(json.dumps(docs[name]))
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


def test_stack_flag_reads_outputs_with_the_pulumi_cli(tmp_path, capsys, monkeypatch):
    bindir = fake_pulumi(tmp_path, {"gcp-euw4-a3high": outputs("gcp-euw4-a3high")})
    monkeypatch.setenv("PATH", str(bindir))
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stack", "gcp-euw4-a3high", "--dry-run")
    assert code == 0, err
    js = list(yaml.safe_load_all(out))[-1]
    assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ko.cluster_queue_name(cfg_of("gcp-euw4-a3high"))
    nets = json.loads(pod_of(js)["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert [n["network"] for n in nets[1:]] == ["vpc1", "vpc2", "vpc3", "vpc4"]  # a3-highgpu: TCPX, 4 GPU VPCs
    code, out, err = run(capsys, "submit", job, "--stack", "nope", "--dry-run")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no stack named" in err
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, out, err = run(capsys, "submit", job, "--stack", "gcp-euw4-a3high", "--dry-run")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pulumi CLI is not on PATH" in err


# ----------------------------------------------------------------------------- applying (fake API server)


class FakeKube:
    """A tiny Kubernetes API: records every request; POST answers 201 (or ``fail``), GET lists one Workload."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any, dict[str, str]]] = []
        self.fail: tuple[int, dict[str, Any]] | None = None
        # POST path suffix -> raw answers (status, body bytes), one per request, before the normal answer
        self.raw: dict[str, list[tuple[int, bytes]]] = {}
        fake = self

        class Handler(JsonHandler):

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n)) if n else None

            def do_POST(self) -> None:
                body = self._body()
                fake.requests.append(("POST", self.path, body, {k.lower(): v for k, v in self.headers.items()}))
                if fake.fail:
                    self._reply(*fake.fail)
                    return
                queued = next((q for k, q in fake.raw.items() if self.path.endswith(k) and q), None)
                if queued:
                    code, data = queued.pop(0)
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                created = json.loads(json.dumps(body))
                created["metadata"]["uid"] = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"
                self._reply(201, created)

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path, None, {k.lower(): v for k, v in self.headers.items()}))
                self._reply(200, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "items": [
                    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                     "metadata": {"name": "jobset-llm-ft-1a2b3", "namespace": "team-a"}}]})

            def do_PATCH(self) -> None:
                body = self._body()
                fake.requests.append(("PATCH", self.path, body, {k.lower(): v for k, v in self.headers.items()}))
                self._reply(200, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def kubeconfig(self) -> dict[str, Any]:
        host, port = self.server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": f"http://{host}:{port}",
                                                          "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "test-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}

    def posts(self) -> list[tuple[str, Any]]:
        return [(path, body) for method, path, body, _ in self.requests if method == "POST"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def kube(monkeypatch) -> Iterator[FakeKube]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    fake = FakeKube()
    yield fake
    fake.close()


def test_apply_posts_the_dry_run_manifest(tmp_path, capsys, kube):
    stacks = write(tmp_path, "stacks.json", {"aws-use1-p5": outputs("aws-use1-p5", kube.kubeconfig)})
    job, _ = job_file(tmp_path)
    code, dry, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 0, err
    code, out, err = run(capsys, "submit", job, "--stacks", stacks)
    assert code == 0, err
    manifest = list(yaml.safe_load_all(dry))
    assert kube.posts() == [
        ("/api/v1/persistentvolumes", manifest[0]),
        ("/api/v1/namespaces/team-a/persistentvolumeclaims", manifest[1]),
        ("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets", manifest[2]),
    ]
    assert all(h.get("authorization") == "Bearer test-token" for *_, h in kube.requests)
    assert "submitted JobSet team-a/llm-ft" in out
    assert "kubectl -n team-a get workloads -l kueue.x-k8s.io/job-uid=0f1e2d3c-aaaa-bbbb-cccc-000000000001" in out


def test_apply_single_node_job_with_kubeconfig_file(tmp_path, capsys, kube):
    stacks = write(tmp_path, "stacks.json", {"aws-usw2-p4d": outputs("aws-usw2-p4d")})  # kubeconfig masked
    kubeconfig = write(tmp_path, "kubeconfig", yaml.safe_dump(kube.kubeconfig))
    job, _ = job_file(tmp_path, accelerator="A100", gpus=8)
    code, dry, _ = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 0
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--json")
    assert code == 2 and "--show-secrets" in err  # the masked stack kubeconfig is refused in one line
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--kubeconfig", kubeconfig, "--json")
    assert code == 0, err
    assert kube.posts() == [("/apis/batch/v1/namespaces/team-a/jobs", next(yaml.safe_load_all(dry)))]
    doc = json.loads(out)
    assert doc["submitted"]["kind"] == "Job" and doc["submitted"]["uid"].startswith("0f1e2d3c")


def test_api_422_is_one_line_exit_2(tmp_path, capsys, kube):
    kube.fail = (422, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
                       "message": 'Job.batch "llm-ft" is invalid: spec.template.spec.containers[0].image: Required'})
    stacks = write(tmp_path, "stacks.json", {"aws-usw2-p4d": outputs("aws-usw2-p4d", yaml.safe_dump(kube.kubeconfig))})
    job, _ = job_file(tmp_path, accelerator="A100", gpus=8)
    code, out, err = run(capsys, "submit", job, "--stacks", stacks)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "HTTP 422" in err and "is invalid" in err
    kube.fail = (403, {"kind": "Status", "message": "jobs.batch is forbidden: User cannot create", "code": 403})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "HTTP 403" in err


def test_via_hub_creates_storage_on_every_worker_of_the_group_and_the_job_on_the_hub(tmp_path, capsys, kube):
    workers = {"aws-use1-p5": FakeKube(), "aws-use2-p5": FakeKube()}
    try:
        docs = {"aws-use1-p5": outputs("aws-use1-p5", workers["aws-use1-p5"].kubeconfig),
                "aws-use2-p5": {**_second_p5(fsx=True), "kubeconfig": workers["aws-use2-p5"].kubeconfig},
                "hub": _hub_with({"aws-use2-p5": "gpufleet-aws-use2-p5"})}
        stacks = write(tmp_path, "stacks.json", docs)
        hub_kubeconfig = write(tmp_path, "hub.kubeconfig", yaml.safe_dump(kube.kubeconfig))
        job, _ = job_file(tmp_path)
        code, _, err = run(capsys, "submit", job, "--stacks", stacks, "--via-hub")
        assert code == 2 and "--kubeconfig" in err  # the hub stack exports no kubeconfig
        code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--via-hub", "--kubeconfig", hub_kubeconfig)
        assert code == 0, err
        for w in workers.values():
            assert [p for p, _ in w.posts()] == ["/api/v1/namespaces/team-a/configmaps", "/api/v1/persistentvolumes",
                                                 "/api/v1/namespaces/team-a/persistentvolumeclaims"]
        assert [p for p, _ in kube.posts()] == ["/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets"]
        # Submit no longer nominates: placement dispatch owns .status.nominatedClusterNames.
        assert not [r for r in kube.requests if r[0] == "PATCH"]
        assert kube.posts()[0][1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == ko.ALL_WORKERS
        assert "placement dispatch nominates the worker" in out
    finally:
        for w in workers.values():
            w.close()


@pytest.mark.parametrize("name, gpus, needle", [
    ("llm-ft\n", 16, "'\\n'"), ("llm_ft", 8, "'_'"), ("1llm", 16, "starts with a digit"), ("j" * 49, 16, "at most 48"),
])
def test_dry_run_refuses_names_the_rendered_kind_would_break(tmp_path, capsys, name, gpus, needle):
    stacks = write(tmp_path, "stacks.json", {s: outputs(s) for s in WORKERS})
    job, _ = job_file(tmp_path, name=name, gpus=gpus, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err and "is required" not in err


def test_dry_run_longest_jobset_name_renders_pod_names_within_63(tmp_path, capsys):
    stacks = write(tmp_path, "stacks.json", {s: outputs(s) for s in WORKERS})
    job, _ = job_file(tmp_path, name="j" * 48, gpus=16, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run")
    assert code == 0, err
    js = list(yaml.safe_load_all(out))[-1]
    rj = js["spec"]["replicatedJobs"][0]
    longest = f"{js['metadata']['name']}-{rj['name']}-{rj['replicas'] - 1}-{rj['template']['spec']['completions'] - 1}"
    assert len(longest + "-abcde") == 63


def _status(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                       "code": code, "message": message}).encode()


@pytest.mark.parametrize("body", [b"<html>created</html>", b'{"kind": "JobSet", "metad', b"", b"[1, 2]"])
def test_a_2xx_answer_that_is_not_json_means_created_not_a_traceback(tmp_path, capsys, kube, body):
    stacks = write(tmp_path, "stacks.json", {"aws-use1-p5": outputs("aws-use1-p5", kube.kubeconfig)})
    job, _ = job_file(tmp_path)
    kube.raw["/persistentvolumes"] = [(201, body)]
    kube.raw["/jobsets"] = [(201, body)]
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--json")
    assert code == 0, err
    submitted = json.loads(out)["submitted"]
    assert (submitted["kind"], submitted["name"], submitted["uid"], submitted["workload_selector"]) == (
        "JobSet", "llm-ft", "", None)
    assert len(kube.posts()) == 3  # PV, PVC, JobSet: each created once
    kube.raw["/jobsets"] = [(201, body)]
    code, out, err = run(capsys, "submit", job, "--stacks", stacks)  # the same in text, with a warning
    assert code == 0 and "submitted JobSet team-a/llm-ft" in out
    assert "do not submit it again" in err and "Traceback" not in err


def test_a_failed_submit_names_what_it_created_and_a_retry_reuses_it(tmp_path, capsys, kube):
    stacks = write(tmp_path, "stacks.json", {"aws-use1-p5": outputs("aws-use1-p5", kube.kubeconfig)})
    job, _ = job_file(tmp_path)
    kube.raw["/jobsets"] = [(500, _status(500, "InternalError", "etcdserver: request timed out"))]
    code, out, err = run(capsys, "submit", job, "--stacks", stacks)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "HTTP 500" in err and "already created" in err and "PersistentVolume " in err
    assert "PersistentVolumeClaim team-a/" in err
    # The retry: storage exists (409) and is reused, the job goes through.
    kube.raw["/persistentvolumes"] = [(409, _status(409, "AlreadyExists", "persistentvolumes already exists"))]
    kube.raw["/persistentvolumeclaims"] = [(409, _status(409, "AlreadyExists", "pvc already exists"))]
    code, out, err = run(capsys, "submit", job, "--stacks", stacks)
    assert code == 0, err
    assert out.count("reused existing") == 2 and "submitted JobSet team-a/llm-ft" in out
    # Submitting the same job again: the job itself exists - exit 2, one line, naming it and the fix.
    kube.raw["/persistentvolumes"] = [(409, _status(409, "AlreadyExists", "exists"))]
    kube.raw["/persistentvolumeclaims"] = [(409, _status(409, "AlreadyExists", "exists"))]
    kube.raw["/jobsets"] = [(409, _status(409, "AlreadyExists", 'jobsets.jobset.x-k8s.io "llm-ft" already exists'))]
    code, out, err = run(capsys, "submit", job, "--stacks", stacks)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "HTTP 409" in err and "exists already" in err and "rename the job" in err


# ----------------------------------------------------------------------------- fabric settings (issue 22)


def test_preferred_topology_is_the_narrowest_network_level_of_each_shape():
    from placement.model import kueue as pk

    book = shape_book()
    p5, p6 = book.get("p5.48xlarge"), book.get("p6-b200.48xlarge")
    a4, mega = book.get("a4-highgpu-8g"), book.get("a3-megagpu-8g")
    assert p5 and p6 and a4 and mega
    assert pk.preferred_topology_level(p5) == "topology.k8s.aws/network-node-layer-3"
    # p6-b200 returns four EC2 network nodes: its nodes carry layer 4, the narrowest.
    assert pk.preferred_topology_level(p6) == "topology.k8s.aws/network-node-layer-4"
    assert pk.topology_levels(p6)[-1] == "kubernetes.io/hostname" and len(pk.topology_levels(p6)) == 5
    assert pk.shape_topology_name(p6) != pk.shape_topology_name(p5) == pk.topology_name("aws")
    for shape in (a4, mega):
        assert pk.preferred_topology_level(shape) == "cloud.google.com/gce-topology-subblock"


def test_gke_reserved_fixed_pool_job_prefers_one_sub_block(tmp_path, capsys):
    job, _ = job_file(tmp_path, accelerator="B200", gpus=16, clouds={"allow": ["gcp"]})
    doc = outputs("gcp-use4-a4")
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", {"gcp-use4-a4": doc}),
                         "--dry-run")
    assert code == 0, err
    js = list(yaml.safe_load_all(out))[-1]
    annotations = pod_of(js)["metadata"]["annotations"]
    if js["metadata"]["annotations"]["gpufleet.io/pool"] == "b200-reserved":  # the fixed-size (TAS) pool
        assert annotations[manifests.PREFERRED_TOPOLOGY] == "cloud.google.com/gce-topology-subblock"
    else:
        assert manifests.PREFERRED_TOPOLOGY not in annotations


def _env(fabric: str, rdma_read: bool) -> dict[str, str]:
    return {e["name"]: e["value"] for e in manifests.efa_env(fabric, rdma_read)}


def test_device_rdma_only_on_shapes_with_efa_rdma_read():
    book = shape_book()
    for name in ("p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"):
        shape = book.get(name)
        assert shape and shape.efa_rdma_read, name
        assert _env(shape.fabric, shape.efa_rdma_read) == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
    for name in ("g6e.48xlarge", "g6.48xlarge", "g6e.12xlarge"):
        shape = book.get(name)
        assert shape and shape.fabric == "efa" and not shape.efa_rdma_read, name
        # libfabric aborts on FI_EFA_USE_DEVICE_RDMA=1 without RDMA read; unset it decides from the device.
        assert _env(shape.fabric, shape.efa_rdma_read) == {"FI_PROVIDER": "efa"}
    assert _env("tcpxo", True) == {}


def test_efa_pod_on_p5_sets_device_rdma(tmp_path, capsys):
    job, _ = job_file(tmp_path, clouds={"allow": ["aws"]})
    code, out, err = run(capsys, "submit", job, "--stacks",
                         write(tmp_path, "s.json", {"aws-use1-p5": _aws_p5("max")}), "--dry-run")
    assert code == 0, err
    env = env_of(pod_of(list(yaml.safe_load_all(out))[-1])["spec"]["containers"][0])
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_tcpx_pods_get_the_full_nccl_set_of_the_pinned_config():
    from placement.model.gpudirect import gpudirect_book

    env = dict(gpudirect_book().get("tcpx").nccl_env)  # type: ignore[union-attr]
    # run-nccl.sh in gpudirect-tcpx/nccl-config.yaml at the pinned commit sets these besides the rest.
    assert env["NCCL_GPUDIRECTTCPX_FORCE_ACK"] == "0"
    assert env["NCCL_GPUDIRECTTCPX_TX_COMPLETION_NANOSLEEP"] == "1000"
    assert env["NCCL_MAX_NCHANNELS"] == env["NCCL_MIN_NCHANNELS"] == "8"
    assert len(env) == 22 and not any(k.startswith("NCCL_DEBUG") for k in env)
# ----------------------------------------------------------------------------- Kueue's flavor rule (issue 20)


def _expression_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    """One NodeSelectorRequirement against a node's labels (k8s.io/component-helpers nodeaffinity)."""
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        have, bound = int(labels.get(key, "0")), int(values[0])
        return key in labels and (have > bound if op == "Gt" else have < bound)
    raise AssertionError(op)


def kueue_flavor_admits(pod_spec: dict[str, Any], flavor: dict[str, Any]) -> bool:
    """Kueue v0.19.2 pkg/scheduler/flavorassigner ``flavorSelector`` + ``Match``: keep only the node selector
    entries and affinity expressions whose key is one of the flavor's own ``nodeLabels`` keys (a term left
    empty makes the whole affinity match any flavor), then match them against the flavor's labels as if
    they were a node's."""
    labels = dict(flavor["spec"].get("nodeLabels") or {})
    selector = {k: v for k, v in (pod_spec.get("nodeSelector") or {}).items() if k in labels}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    terms = []
    for term in required["nodeSelectorTerms"]:
        kept = [e for e in term.get("matchExpressions", []) if e["key"] in labels]
        if not kept:
            return True  # terms are ORed: an empty one matches every flavor
        terms.append(kept)
    return any(all(_expression_matches(e, labels) for e in term) for term in terms)


def test_a_tcpx_job_through_the_hub_is_never_admitted_on_an_aws_worker(tmp_path, capsys):
    docs = {s: outputs(s) for s in WORKERS}
    docs["hub"] = hub_outputs("External")
    # 16 x H100 in europe-west4: the A3 High (GPUDirect-TCPX) worker; its pool h100-spot has an AWS namesake.
    job, _ = job_file(tmp_path, regions={"allow": ["europe-west4"]})
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", docs), "--dry-run", "--json",
                         "--via-hub")
    assert code == 0, err
    result = json.loads(out)
    assert result["chosen"]["group"]["name"] == "tcpx"
    pod_spec = pod_of(result["manifest"][-1])["spec"]
    aws_flavors = [o for o in ko.worker_objects(cfg_of("aws-use1-p5")) if o["kind"] == "ResourceFlavor"]
    gke_flavors = [o for o in ko.worker_objects(cfg_of("gcp-euw4-a3high")) if o["kind"] == "ResourceFlavor"]
    shared = {f["metadata"]["name"] for f in aws_flavors} & {f["metadata"]["name"] for f in gke_flavors}
    assert "h100-spot" in shared  # the clash that let it through
    assert not any(kueue_flavor_admits(pod_spec, f) for f in aws_flavors)
    assert all(kueue_flavor_admits(pod_spec, f) for f in gke_flavors)
    # With flavors that name only their pool (before issue 20) the AWS namesake admitted the TCPX job.
    pool_only = [{**f, "spec": {**f["spec"], "nodeLabels": {ko.POOL_LABEL: f["metadata"]["name"]}}}
                 for f in aws_flavors]
    assert any(kueue_flavor_admits(pod_spec, f) for f in pool_only)


def test_rendered_jobsets_validate_against_the_jobset_crd(tmp_path, capsys):
    from infra.k8s.crd_validate import CRDValidator

    validator = CRDValidator(Path(__file__).resolve().parents[3] / "tests" / "data" / "jobset-crds")
    docs = {s: outputs(s) for s in WORKERS}
    docs["hub"] = hub_outputs("External")
    stacks = write(tmp_path, "s.json", docs)
    for argv in ((), ("--via-hub",)):
        job, _ = job_file(tmp_path, deadline_hours=40, capacity="spot")
        code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--dry-run", "--json", *argv)
        assert code == 0, err
        result = json.loads(out)
        js = result["manifest"][-1]
        assert js["kind"] == "JobSet"
        assert validator.validate(js) == []
        assert js["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] == str(40 * 3600)
        # The JSON says how the job is run to its end, as rendered.
        run_ = result["chosen"]["run"]
        assert run_["max_restarts"] == js["spec"]["failurePolicy"]["maxRestarts"] > run_["expected_interruptions"]
        assert run_["max_exec_seconds"] == 40 * 3600 and run_["deadline"].endswith("Z")
        grace = pod_of(js)["spec"]["terminationGracePeriodSeconds"]
        assert run_["grace_seconds"] == grace
