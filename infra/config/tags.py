"""``gpufleet:tags``: the tags every taggable resource of a stack carries (labels on GCP).

Owns the tag rules: each cloud's key and value syntax, the keys the stacks set themselves, the number a
resource takes, and the two every stack must set (owner, cost-center).

May import: the standard library, :mod:`placement.errors` and :mod:`infra.config.fields`; no Pulumi SDK.
"""

from __future__ import annotations

import re
from typing import Any

from infra.config.fields import ConfigError, _key, _mapping, _str
from placement.errors import shown

# Tags the stacks set themselves on every resource (infra/aws/layout.py resource_tags, infra/gcp/plan.py
# gcp_labels, the GPU node groups' gpufleet.io/ tags): a user tag of that key would be overwritten silently.
_OWN_TAGS = {"aws": ("Name", "gpufleet-stack", "gpufleet-cluster", "gpufleet.io/"), "gcp": ("gpufleet-stack",)}
# Per-resource tag limits less the tags the stacks add: AWS 50 tags (5 ours), GCP 64 labels (1 ours).
_MAX_TAGS = {"aws": 45, "gcp": 63}
# AWS tag keys (1..128) and values (..256): letters, digits, spaces and _ . : / = + - @; no "aws:" prefix.
_AWS_TAG = re.compile(r"[\w .:/=+\-@]*")
# GCP labels: keys 1..63 starting with a lower-case letter, values ..63; lower-case letters, digits, _ and -.
_GCP_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_GCP_LABEL_VALUE = re.compile(r"[a-z0-9_-]{1,63}")


def parse_tags(value: Any, cloud: str) -> dict[str, str]:
    """``gpufleet:tags``: non-empty string values (numbers taken as their text) within the cloud's tag or label
    rules (GCP stacks put them on resources as labels, unchanged), owner and cost-center required."""
    tags: dict[str, str] = {}
    for k, v in _mapping(value, "tags").items():
        path = f"tags.{k}"
        if v is None or v == "":
            raise ConfigError(_key(path), "has an empty value; give it a value or remove the tag")
        text = _str(v, path, numbers=True)
        if any(k == own or (own.endswith("/") and k.startswith(own)) for own in _OWN_TAGS[cloud]):
            raise ConfigError(_key(path), "is set by the stack itself on every resource; remove it or rename it")
        if cloud == "aws":
            if not 1 <= len(k) <= 128 or not _AWS_TAG.fullmatch(k) or k.lower().startswith("aws:"):
                raise ConfigError(_key(path), "is not an AWS tag key: 1-128 letters, digits, spaces and "
                                              "_ . : / = + - @, not starting with aws:")
            if len(text) > 256 or not _AWS_TAG.fullmatch(text):
                raise ConfigError(_key(path), f"value {shown(text)} is not an AWS tag value: at most 256 letters, "
                                              "digits, spaces and _ . : / = + - @")
        else:
            if not _GCP_LABEL_KEY.fullmatch(k):
                raise ConfigError(_key(path), "is not a GCP label key (tags are labels on GCP): at most 63 lower-case "
                                              "letters, digits, '_' and '-', starting with a letter")
            if not _GCP_LABEL_VALUE.fullmatch(text):
                raise ConfigError(_key(path), f"value {shown(text)} is not a GCP label value (tags are labels on "
                                              "GCP): at most 63 lower-case letters, digits, '_' and '-'")
        tags[k] = text
    if len(tags) > _MAX_TAGS[cloud]:
        raise ConfigError(_key("tags"), f"has {len(tags)} tags; {cloud} resources take at most {_MAX_TAGS[cloud]} "
                                        "besides the ones the stack sets")
    for required in ("owner", "cost-center"):
        if not tags.get(required):
            raise ConfigError(
                _key(f"tags.{required}"), "is required: every taggable resource carries owner and cost-center"
            )
    return tags
