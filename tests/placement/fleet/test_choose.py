"""The portable group of a job sent through the hub, on hand-made stacks (pure)."""

from __future__ import annotations

from factories import job, offer

from placement.fleet.choose import Existing, portable_group
from placement.fleet.stacks import ClusterStack, Pool, Queue, TrainingAccount, parse_fleet
from placement.model.jobspec import JobSpec
from placement.plan.job import Candidate, candidates

QUEUES = (Queue("team-a", "all-workers"),)


def stack(name: str, region: str, *pools: Pool, cloud: str = "aws", account: str = "trainer") -> ClusterStack:
    return ClusterStack(stack=name, cloud=cloud, region=region, cluster_name=f"c-{name}", pools=pools,
                        kubeconfig=None, checkpoint_uri=f"s3://{name}/ckpt", filesystem=None,
                        service_account=TrainingAccount(account, ("team-a",)), local_queues=QUEUES)


def chosen(j: JobSpec, cl: ClusterStack) -> tuple[Candidate, Existing]:
    p = cl.pools[0]
    (c,) = [c for c in candidates(j, [offer(p.instance_type, cl.region, p.zone)]) if c.capacity == p.capacity]
    return c, Existing(cl, p, "team-a", "all-workers")


def test_efa_group_keeps_same_shape_family_and_leaves_out_a_pool_name_clash():
    a = stack("a", "us-east-1", Pool("h100", "p5.48xlarge", "spot", "z1", 4))
    b = stack("b", "us-east-2", Pool("h100", "p5.48xlarge", "spot", "z2", 4))
    # c's p5 pool fits, but its p4d pool is also named "h100": the pod's affinity would let the job onto it.
    c = stack("c", "us-west-2", Pool("big", "p5.48xlarge", "spot", "z3", 4),
              Pool("h100", "p4d.24xlarge", "spot", "z3", 4))
    d = stack("d", "us-west-2", Pool("h100", "p5.48xlarge", "spot", "z4", 1))  # too small for 2 nodes
    e = stack("e", "us-east-1", Pool("h100", "p5.48xlarge", "spot", "z5", 4), account="other")
    j = job(gpus=16)
    cand, ex = chosen(j, a)
    g = portable_group(j, cand, ex, [a, b, c, d, e], None)
    assert g.name == "efa" and g.nodes == 2 and g.keys == ("a", "b")
    why = dict(x.split(": ", 1) for x in g.excluded)
    assert "pool name h100" in why["c"] and "no pool of the efa group" in why["d"] and "other" in why["e"]


def test_single_node_group_crosses_clouds_and_respects_the_jobs_clouds():
    a = stack("a", "us-east-1", Pool("h100", "p5.48xlarge", "spot", "z1", 4))
    g1 = stack("g", "us-central1", Pool("mega", "a3-megagpu-8g", "spot", "us-central1-a", 4), cloud="gcp")
    j = job(gpus=8)
    cand, ex = chosen(j, a)
    assert portable_group(j, cand, ex, [a, g1], None).keys == ("a", "g")
    j = job(gpus=8, clouds={"allow": ["aws"]})
    cand, ex = chosen(j, a)
    g = portable_group(j, cand, ex, [a, g1], None)
    assert g.keys == ("a",) and any(x.startswith("g: cloud gcp") for x in g.excluded)


def test_fleet_file_refuses_a_hub_and_bad_keys():
    import pytest

    from placement.errors import InputError

    ok = {"cloud": "aws", "region": "us-east-1", "clusterName": "c", "nodePools": []}
    assert parse_fleet({"w1": ok}, "f")[0].stack == "w1"
    for doc, needle in (({"W 1": ok}, "W 1"), ({"hub": {"role": "hub"}}, "hub stack"), ([], "fleet")):
        with pytest.raises(InputError, match=needle):
            parse_fleet(doc, "f")
