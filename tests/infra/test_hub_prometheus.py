"""The hub's Prometheus server (issue 26): installed, pinned, beside an External dispatcher unless the user names
a server of their own (``gpufleet:hub.dispatch.prometheusUrl``, validated); it keeps the dispatcher's
observations across restarts (a volume) and scrapes its pods by their annotations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest
from siblings import sibling

from infra import mockrun
from infra.k8s import dispatcher as dp
from infra.k8s import prometheus

RELEASE = "kubernetes:helm.sh/v3:Release"


_hub = sibling(__file__, "test_hub.py")
hub_cfg, workers, fabricated_outputs = _hub.hub_cfg, _hub.workers, _hub.fabricated_outputs  # its fixtures


def _prometheus_releases(run: mockrun.RunResult) -> list[Any]:
    return [r for r in run.of_type(RELEASE) if r.inputs.get("chart") == prometheus.CHART]


def test_the_hub_installs_a_pinned_prometheus_beside_the_external_dispatcher(fabricated_outputs: Any) -> None:
    run = mockrun.run_stack(_hub.HUB_STACK)
    (release,) = _prometheus_releases(run)
    assert release.inputs["version"] == prometheus.CHART_VERSION
    assert release.inputs["repositoryOpts"]["repo"] == prometheus.REPOSITORY
    values = release.inputs["values"]
    assert values["server"]["persistentVolume"]["enabled"] is True and values["server"]["retention"]
    assert all(not values[c]["enabled"] for c in ("alertmanager", "kube-state-metrics", "prometheus-node-exporter",
                                                 "prometheus-pushgateway"))
    # Its default kubernetes-pods job scrapes the dispatcher's pods by these annotations, each replica alone.
    annotations = dp.pod_template(_hub.load_stack_file(_hub.HUB_STACK).hub.dispatch)["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(dp.METRICS_PORT)}
    # Issue 37: that job alone, in the dispatcher's namespace; the chart's other default jobs are off.
    jobs = values["scrapeConfigs"]
    assert set(jobs) == set(prometheus.DEFAULT_SCRAPE_JOBS)
    assert [j for j, v in jobs.items() if v["enabled"]] == ["kubernetes-pods"]
    assert jobs["kubernetes-pods"]["kubernetes_sd_configs"] == [
        {"role": "pod", "namespaces": {"names": [dp.NAMESPACE]}}]
    # Issue 37: a named StorageClass (the example hub is on AWS) and a size bound below the volume's.
    server = values["server"]
    assert server["persistentVolume"]["storageClass"] == prometheus.DEFAULT_STORAGE_CLASS["aws"] == "gp2"
    assert server["retentionSize"] == prometheus.DEFAULT_RETENTION_SIZE == "16GB"


def test_the_storage_class_and_retention_size_come_from_the_stack_config(fabricated_outputs: Any) -> None:
    dispatch = {"replicas": 2, "prometheusStorageClass": "ebs-gp3", "prometheusRetentionSize": "12GB"}
    run = mockrun.run_stack(_hub.HUB_STACK, config_override={"hub": _hub.hub_section(dispatch=dispatch)})
    (release,) = _prometheus_releases(run)
    server = release.inputs["values"]["server"]
    assert (server["persistentVolume"]["storageClass"], server["retentionSize"]) == ("ebs-gp3", "12GB")


@pytest.mark.parametrize("key, value", [("prometheusRetentionSize", "20GiB"), ("prometheusRetentionSize", "25GB"),
                                        ("prometheusRetentionSize", 16), ("prometheusStorageClass", "Fast_SSD"),
                                        ("prometheusStorageClass", "")])
def test_a_bad_storage_class_or_retention_size_is_refused_naming_the_key(key: str, value: Any) -> None:
    from infra.config import ConfigError, parse

    hub = _hub.hub_section(dispatch={"replicas": 2, key: value})
    raw = {k.split(":", 1)[1]: v for k, v in _hub.yaml.safe_load(Path(_hub.HUB_STACK).read_text())["config"].items()}
    with pytest.raises(ConfigError) as err:
        parse({**raw, "hub": hub}, stack="hub")
    assert str(err.value).startswith(f"gpufleet:hub.dispatch.{key}: ") and "\n" not in str(err.value)


def test_a_named_prometheus_is_used_instead_and_none_is_installed(fabricated_outputs: Any) -> None:
    dispatch = {"replicas": 2, "prometheusUrl": "http://prometheus.monitoring.svc:9090"}
    run = mockrun.run_stack(_hub.HUB_STACK, config_override={"hub": _hub.hub_section(dispatch=dispatch)})
    assert not _prometheus_releases(run)
    run = mockrun.run_stack(_hub.HUB_STACK, config_override={"hub": _hub.hub_section(dispatcher="AllAtOnce",
                                                                                     dispatch=None)})
    assert not _prometheus_releases(run)  # no dispatcher, nothing observed


@pytest.mark.parametrize("url", ["prometheus:9090", "ftp://p", "http://user:pass@p:9090", "http://p 9090", 9090])
def test_a_prometheus_url_that_is_not_one_is_refused_naming_the_key(fabricated_outputs: Any, url: Any) -> None:
    with pytest.raises(pulumi.RunError) as err:  # the program's one-line form of a ConfigError
        mockrun.run_stack(_hub.HUB_STACK, config_override={"hub": _hub.hub_section(
            dispatch={"replicas": 2, "prometheusUrl": url})})
    assert "hub.dispatch.prometheusUrl" in str(err.value) and "pass" not in str(err.value)


def test_the_volume_keys_are_refused_beside_a_named_prometheus() -> None:
    from infra.config import ConfigError, parse

    hub = _hub.hub_section(dispatch={"replicas": 2, "prometheusUrl": "http://prom.monitoring.svc:9090",
                                     "prometheusStorageClass": "gp3"})
    raw = {k.split(":", 1)[1]: v for k, v in _hub.yaml.safe_load(Path(_hub.HUB_STACK).read_text())["config"].items()}
    with pytest.raises(ConfigError, match=r"^gpufleet:hub\.dispatch\.prometheusStorageClass: only applies"):
        parse({**raw, "hub": hub}, stack="hub")
