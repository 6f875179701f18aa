"""``gpufleet:hub.dispatch``: the ``placement dispatch`` Deployment a hub runs when its dispatcher is External.

Owns :class:`DispatchConfig`: the dispatcher image (a reference, or built by the stack for a platform), its
replicas, admission deadline and wait price, container resources, ServiceAccount annotations (the cloud
identity it reads live prices with), image pull Secret and the user's own Prometheus server.

May import: the standard library, :mod:`placement.errors` and :mod:`infra.config.fields`; no Pulumi SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.config.fields import (
    _DNS_SUBDOMAIN,
    ConfigError,
    _bool,
    _float,
    _int,
    _key,
    _mapping,
    _opt_str,
    _str,
    _unknown_keys,
)
from placement.errors import shown


@dataclass(frozen=True)
class DispatchConfig:
    """The ``placement dispatch`` Deployment a hub runs when its dispatcher is External.

    ``image`` is an image built from ``placement/dispatch/Dockerfile`` (best by digest); None: the hub stack
    builds that Dockerfile for ``platform`` (``linux/amd64`` or ``linux/arm64``, the hub nodes'), pushes it to a
    registry it creates and runs it by digest (:mod:`infra.k8s.dispatch_image`); ``admission_deadline_seconds``
    is how long a nominated worker may take to admit before the next-best one is tried (seconds);
    ``wait_usd_per_gpu_hour`` prices the expected wait for admission (USD per GPU-hour);
    ``resources`` is the container's Kubernetes ``resources`` (requests/limits) or None; ``live`` runs it
    with ``--live`` (live spot prices and offerings, read with the pod's cloud identity);
    ``service_account_annotations`` go on its ServiceAccount, to bind that identity (IRSA role ARN, GKE
    Workload Identity).
    """

    image: str | None = None
    platform: str = "linux/amd64"
    replicas: int = 2
    admission_deadline_seconds: int = 300
    wait_usd_per_gpu_hour: float = 2.0
    resources: Mapping[str, Mapping[str, str]] | None = None
    live: bool = False
    service_account_annotations: Mapping[str, str] = field(default_factory=dict)
    # A kubernetes.io/dockerconfigjson Secret in kueue-system the pods pull the image with (a hub that is not
    # EKS/GKE in the registry's account/project, whose nodes cannot pull with their own identity); None: node
    # identity. The operator keeps it valid (ECR tokens last 12 hours): docs/kueue-hub.md.
    image_pull_secret: str | None = None
    # A Prometheus server of the user's that scrapes the dispatcher (its observations for `placement calibrate`);
    # None: the hub installs one (infra.k8s.prometheus).
    prometheus_url: str | None = None


_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?")


def _resources(value: Any, path: str) -> Mapping[str, Mapping[str, str]] | None:
    """A container's ``resources``: ``requests``/``limits``, each ``cpu``/``memory`` quantities."""
    if value is None:
        return None
    res = _mapping(value, path)
    _unknown_keys(res, {"requests", "limits"}, path)
    out: dict[str, dict[str, str]] = {}
    for part, amounts in res.items():
        amounts = _mapping(amounts, f"{path}.{part}")
        _unknown_keys(amounts, {"cpu", "memory"}, f"{path}.{part}")
        for name, amount in amounts.items():
            text = _str(amount, f"{path}.{part}.{name}", numbers=True)
            if not _QUANTITY.fullmatch(text):
                raise ConfigError(_key(f"{path}.{part}.{name}"),
                                  f"must be a Kubernetes quantity such as 500m or 256Mi, got {shown(amount)}")
            out.setdefault(part, {})[name] = text
    return out


DOCKER_BUILD = "docker build -f placement/dispatch/Dockerfile -t <image> ."
# Platforms the hub builds the dispatcher image for (python:3.11-slim has both).
DISPATCH_PLATFORMS = ("linux/amd64", "linux/arm64")
# An annotation key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
_ANNOTATION_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ANNOTATION_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _annotations(value: Any, path: str) -> Mapping[str, str]:
    """Kubernetes annotations: ``prefix/name`` keys (the prefix optional, a DNS subdomain) to string values."""
    out: dict[str, str] = {}
    for k, v in _mapping(value, path).items():
        key = str(k)
        prefix, _, name = key.rpartition("/")
        if not _ANNOTATION_NAME.fullmatch(name) or (prefix and (len(prefix) > 253
                                                              or not _ANNOTATION_PREFIX.fullmatch(prefix))):
            raise ConfigError(_key(f"{path}.{key}"), "is not an annotation key: [prefix/]name, the prefix a DNS "
                                                     "subdomain, the name at most 63 letters, digits, '-', '_', '.'")
        if not isinstance(v, str):
            raise ConfigError(_key(f"{path}.{key}"), f"must be a string (quote it), got {shown(v)}")
        out[key] = v
    return out


def parse_dispatch(value: Any, dispatcher: str) -> DispatchConfig:
    """``gpufleet:hub.dispatch``: the dispatcher Deployment (see :class:`DispatchConfig`)."""
    path = "hub.dispatch"
    raw = _mapping(value, path)
    _unknown_keys(raw, {"image", "platform", "replicas", "admissionDeadlineSeconds", "waitUsdPerGpuHour",
                        "resources", "live", "serviceAccountAnnotations", "imagePullSecret",
                        "prometheusUrl"}, path)
    pull_secret = _opt_str(raw.get("imagePullSecret"), f"{path}.imagePullSecret")
    if pull_secret is not None and (len(pull_secret) > 253 or not _DNS_SUBDOMAIN.fullmatch(pull_secret)):
        raise ConfigError(_key(f"{path}.imagePullSecret"), f"{shown(pull_secret)} is not a Secret name (a DNS-1123 "
                                                           "subdomain: lower-case letters, digits, '-' and '.')")
    image = raw.get("image")
    if image is not None:
        image = _str(image, f"{path}.image")
        if any(ch.isspace() for ch in image):
            raise ConfigError(_key(f"{path}.image"), f"{shown(image)} is not an image reference; unset it to have "
                                                     f"the stack build and push one (or `{DOCKER_BUILD}`)")
    platform = _str(raw.get("platform", DispatchConfig.platform), f"{path}.platform")
    if platform not in DISPATCH_PLATFORMS:
        raise ConfigError(_key(f"{path}.platform"), f"must be {' or '.join(DISPATCH_PLATFORMS)} (the hub nodes' "
                                                    f"architecture), got {shown(platform)}")
    if image is not None and "platform" in raw:
        raise ConfigError(_key(f"{path}.platform"), "only applies to the image the stack builds; remove it or unset "
                                                    "gpufleet:hub.dispatch.image")
    return DispatchConfig(
        image=image,
        platform=platform,
        replicas=_int(raw.get("replicas", 2), f"{path}.replicas", minimum=1),
        admission_deadline_seconds=_int(raw.get("admissionDeadlineSeconds", 300),
                                        f"{path}.admissionDeadlineSeconds", minimum=1),
        wait_usd_per_gpu_hour=_float(raw.get("waitUsdPerGpuHour", 2.0), f"{path}.waitUsdPerGpuHour"),
        resources=_resources(raw.get("resources"), f"{path}.resources"),
        live=_bool(raw.get("live", False), f"{path}.live"),
        service_account_annotations=_annotations(raw.get("serviceAccountAnnotations"),
                                                 f"{path}.serviceAccountAnnotations"),
        image_pull_secret=pull_secret,
        prometheus_url=_prometheus_url(raw.get("prometheusUrl"), f"{path}.prometheusUrl"),
    )


def _prometheus_url(value: Any, path: str) -> str | None:
    """The user's own Prometheus server: an http(s) URL with a host and nothing else (no credentials in it)."""
    if value is None:
        return None
    from urllib.parse import urlsplit

    text = _str(value, path)
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        host = None
    if any(ch.isspace() for ch in text) or parts.scheme not in ("http", "https") or not host or "@" in parts.netloc:
        raise ConfigError(_key(path), "must be the http(s):// URL of a Prometheus server that scrapes the "
                                      "dispatcher, such as http://prometheus.monitoring.svc:9090 (no credentials "
                                      "in it); unset it to have the hub install one")
    return text
