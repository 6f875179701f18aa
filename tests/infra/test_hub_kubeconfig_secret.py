"""The hub stack writes worker kubeconfig Secrets in the form the dispatcher loads: data only (issue 21)."""

from __future__ import annotations

import pytest
import yaml

from infra.k8s.hub import _secret_kubeconfig
from placement.fleet.kube import static_kubeconfig


def _worker(cluster: dict[str, str]) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "w",
                           "clusters": [{"name": "w", "cluster": cluster}],
                           "users": [{"name": "w", "user": {"exec": {"command": "aws", "args": ["eks", "get-token"]}}}],
                           "contexts": [{"name": "w", "context": {"cluster": "w", "user": "w"}}]})


def test_the_secret_holds_server_ca_and_a_static_token_and_no_exec_plugin():
    text = _secret_kubeconfig(_worker({"server": "https://w.example", "certificate-authority-data": "Y2EtZGF0YQ=="}),
                              "tok-123456", "w-gpufleet-dispatch", "w")
    doc = static_kubeconfig(text, "Secret")
    assert doc["users"][0]["user"] == {"token": "tok-123456"}
    assert "exec" not in text and "get-token" not in text


def test_a_worker_kubeconfig_whose_ca_is_a_file_is_refused_at_pulumi_up():
    with pytest.raises(ValueError, match="certificate-authority-data is required"):
        _secret_kubeconfig(_worker({"server": "https://w.example", "certificate-authority": "/home/me/ca.pem"}),
                           "tok-123456", "u", "w")
