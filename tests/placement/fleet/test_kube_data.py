"""Kubeconfigs read as data (a worker's Secret), list answers read as hostile data, and the redaction layer."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from placement.fleet.errors import FleetError
from placement.fleet.kube import Unreadable, parse_list, static_kubeconfig
from placement.fleet.redact import MASK, redact, remember

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def kubeconfig(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "w",
            "clusters": [{"name": "w", "cluster": cluster or {"server": "https://w.example:443",
                                                              "certificate-authority-data": CA}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "w", "context": {"cluster": "w", "user": "u"}}]}


def test_a_static_token_or_a_client_certificate_is_accepted_as_data():
    doc = static_kubeconfig(kubeconfig({"token": "abcdef123"}), "Secret s")
    assert doc["users"][0]["user"] == {"token": "abcdef123"}
    assert doc["clusters"][0]["cluster"] == {"server": "https://w.example:443", "certificate-authority-data": CA}
    doc = static_kubeconfig(kubeconfig({"client-certificate-data": CA, "client-key-data": CA}), "Secret s")
    assert set(doc["users"][0]["user"]) == {"client-certificate-data", "client-key-data"}
    static_kubeconfig(kubeconfig({"token": "t"}, {"server": "http://127.0.0.1:8080"}), "Secret s")  # loopback


@pytest.mark.parametrize("user, cluster, needle", [
    ({"exec": {"command": "aws", "args": ["eks", "get-token"]}}, None, "user.exec runs a command"),
    ({"auth-provider": {"name": "gcp"}}, None, "user.auth-provider calls"),
    ({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, None, "user.tokenFile reads a file"),
    ({"client-certificate": "/etc/c.pem", "client-key": "/etc/k.pem"}, None, "user.client-certificate is a file"),
    ({"token": "t"}, {"server": "https://w", "certificate-authority": "/etc/ca.pem"}, "cluster.certificate-authority"),
    ({"username": "a", "password": "b"}, None, "basic authentication"),
    ({"token": "t", "as": "system:admin"}, None, "impersonates"),
    ({"token": "t"}, {"server": "https://w", "insecure-skip-tls-verify": True}, "turns off server verification"),
    ({"token": "t"}, {"server": "http://worker.example"}, "must be an https:// URL"),
    ({"token": "t"}, {"server": "https://worker.example"}, "certificate-authority-data is required"),
    ({}, None, "has no credential"),
    ({"client-certificate-data": CA}, None, "go together"),
    ({"token": "t"}, {"server": "https://w", "certificate-authority-data": "not base64!"}, "is not base64"),
    ({"token": "t", "color": "blue"}, None, "user.color is not accepted"),
])
def test_everything_but_data_is_refused_naming_the_field(user, cluster, needle):
    with pytest.raises(FleetError) as err:
        static_kubeconfig(kubeconfig(user, cluster), "Secret gpufleet-dispatch-w")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_list_answer_is_read_as_hostile_data():
    items, rv, dropped = parse_list(b'{"metadata": {"resourceVersion": "7"}, "items": [1, null, {"metadata": {"name": '
                                    b'"a"}}, {"metadata": {"name": 5}}]}', "application/json")
    assert [o["metadata"]["name"] for o in items] == ["a"] and rv == "7" and dropped == 3
    for body, ctype, needle in ((b"<html/>", "text/html; charset=utf-8", "text/html"),
                                (b"[" * 100_000, "application/json", "not JSON"),
                                (b'{"items": 5}', "application/json", "not a Kubernetes list"),
                                (b"[]", "application/json", "not a Kubernetes list")):
        with pytest.raises(Unreadable, match=needle):
            parse_list(body, ctype)


def test_redaction_masks_known_secrets_and_credential_shapes():
    remember("worker-7-token-zzz")
    text = redact('HTTP 403: {"message": "Authorization: Bearer abc.def.ghi denied"} worker-7-token-zzz '
                  '"client-key-data": "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=" token=sekrit '
                  "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY----- "
                  "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.sig")
    for secret in ("abc.def.ghi", "worker-7-token-zzz", "LS0tLS1CRUdJTi", "sekrit", "MIIE", "eyJhbGciOiJSUzI1NiJ9"):
        assert secret not in text
    assert text.count(MASK) >= 6
    plain = "nominated aws-use1-p5: $1,234.00 on pool p5-spot"
    assert redact(plain) == plain
