"""Validate rendered Kubernetes objects against CustomResourceDefinition schemas, offline.

The API server checks a custom object in several passes; this module reproduces the ones that can
fail a Kueue object we render:

1. **Structural schema** (``openAPIV3Schema`` of the served version) with ``jsonschema``. Kubernetes
   extensions are mapped to plain JSON Schema: ``x-kubernetes-int-or-string`` already comes with an
   ``anyOf: [integer, string]`` (a ``pattern`` beside it applies to strings only, as in Kubernetes);
   objects with ``properties`` and neither ``additionalProperties`` nor
   ``x-kubernetes-preserve-unknown-fields`` reject unknown fields, as ``kubectl apply
   --validate=strict`` / server-side field validation ``Strict`` does (a misspelt field such as
   ``cohort`` for ``cohortName`` would otherwise be pruned silently). ``format: int32/int64`` is
   range-checked; RE2 patterns with inline flags after ``^`` are rewritten for Python's ``re``.
2. **Defaulting** (``default:`` values) before the CEL rules run, as the API server does.
3. **List semantics**: ``x-kubernetes-list-type: map`` (unique ``x-kubernetes-list-map-keys``) and
   ``set`` (unique items).
4. **CEL rules** (``x-kubernetes-validations``): there is no CEL evaluator here, so each rule the
   Kueue v1beta2 CRDs carry is mirrored by a Python predicate in :data:`_CEL_RULES`, keyed by the exact
   rule text. Transition rules (those reading ``oldSelf``) only run on update and are skipped. A rule
   that is neither mirrored nor a transition rule is recorded in :attr:`CRDValidator.unevaluated_rules`
   so tests can insist that every rule an object reached was really evaluated.
5. **Metadata**: name is a DNS-1123 subdomain; namespaced kinds need a namespace, cluster-scoped
   kinds must not have one.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def default_crd_dir() -> Path:
    """The pinned Kueue CRDs the repository carries for its tests (``<repo>/tests/data/kueue-crds``, Kueue v0.19.2)."""
    return Path(__file__).resolve().parents[2] / "tests" / "data" / "kueue-crds"


def _unique(items: list[Any]) -> bool:
    return all(items.count(i) == 1 for i in items)


# Python mirrors of the CEL rules in the Kueue v0.19 v1beta2 CRDs (create-time rules only).
_CEL_RULES: dict[str, Callable[[Any], bool]] = {
    # ResourceFlavor
    "!has(self.topologyName) || self.nodeLabels.size() >= 1":
        lambda s: "topologyName" not in s or len(s.get("nodeLabels") or {}) >= 1,
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])":
        lambda s: all(x.get("effect") in _TAINT_EFFECTS for x in s),
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)":
        lambda s: all("key" in x or x.get("operator") == "Exists" for x in s),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)":
        lambda s: all("tolerationSeconds" not in x or x.get("effect") == "NoExecute" for x in s),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])":
        lambda s: all(x.get("operator", "Equal") in ("Equal", "Exists") for x in s),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)":
        lambda s: all(not (x.get("operator") == "Exists" and "value" in x) for x in s),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])":
        lambda s: all(x.get("effect", "NoSchedule") in _TAINT_EFFECTS for x in s),
    # ClusterQueue
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true":
        lambda s: "cohortName" in s or "resourceGroups" not in s or all(
            "borrowingLimit" not in r for rg in s["resourceGroups"] for f in rg["flavors"] for r in f["resources"]),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')":
        lambda s: "preference" not in s or (s.get("whenCanBorrow") == "TryNextFlavor"
                                            and s.get("whenCanPreempt") == "TryNextFlavor"),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  "
    "self.borrowWithinCohort.policy != 'Never')":
        lambda s: not (s.get("reclaimWithinCohort") == "Never" and "borrowWithinCohort" in s
                       and s["borrowWithinCohort"].get("policy") != "Never"),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))":
        lambda s: all(len(f["resources"]) == len(s["coveredResources"]) for f in s["flavors"]),
    # Topology, MultiKueueConfig
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": _unique,
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || "
    "self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname'":
        lambda s: all(lv.get("nodeLabel") != "kubernetes.io/hostname" for lv in s)
        or s[-1].get("nodeLabel") == "kubernetes.io/hostname",
    # MultiKueueCluster
    "[has(self.kubeConfig),has(self.clusterProfileRef)].filter(x,x==true).size() == 1":
        lambda s: ("kubeConfig" in s) + ("clusterProfileRef" in s) == 1,
}


def _normalise_rule(rule: str) -> str:
    return " ".join(rule.split())


_CEL = {_normalise_rule(k): v for k, v in _CEL_RULES.items()}


def _strict(schema: Any) -> Any:
    """Copy of ``schema`` where objects with declared properties reject unknown fields."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        # Kubernetes patterns are RE2; Python wants inline global flags first: ^(?i)x -> (?i)^x.
        out["pattern"] = re.sub(r"^\^\((\?[aiLmsux]+)\)", r"(\1)^", pattern)
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """Fill ``default:`` values into present objects, depth first, like the API server's defaulting."""
    if isinstance(value, dict) and schema.get("type") == "object":
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in (schema.get("properties") or {}):
                    value[key] = _apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_apply_defaults(schema["items"], v) for v in value]
    return value


def _walk(schema: Mapping[str, Any], value: Any, path: str) -> Iterator[tuple[Mapping[str, Any], Any, str]]:
    """Every (subschema, value, path) pair where the value is present."""
    yield schema, value, path
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if key in props:
                yield from _walk(props[key], sub, f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from _walk(extra, sub, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _walk(schema["items"], item, f"{path}[{i}]")


class CRDValidator:
    """Validates objects of the kinds defined by the CRD YAML files in one folder."""

    def __init__(self, crd_dir: Path | str | None = None) -> None:
        import jsonschema

        self.crd_dir = Path(crd_dir) if crd_dir else default_crd_dir()
        if not self.crd_dir.is_dir():
            raise FileNotFoundError(f"CRD folder {self.crd_dir} does not exist")
        self._schemas: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
        for path in sorted(self.crd_dir.glob("*.yaml")):
            # The Workload CRD alone is megabytes of YAML: use libyaml when it is there.
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            with open(path, encoding="utf-8") as fh:
                for doc in yaml.load_all(fh, Loader=loader):
                    if not doc or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    spec = doc["spec"]
                    for version in spec["versions"]:
                        api_version = f"{spec['group']}/{version['name']}"
                        schema = version["schema"]["openAPIV3Schema"]
                        self._schemas[(api_version, spec["names"]["kind"])] = (schema, spec["scope"])
        self._jsonschema = jsonschema
        checker = jsonschema.FormatChecker()
        for fmt, (low, high) in _INT_RANGES.items():
            checker.checks(fmt)(lambda v, lo=low, hi=high: not isinstance(v, int) or lo <= v <= hi)
        self._checker = checker
        self.unevaluated_rules: set[str] = set()

    def kinds(self) -> set[tuple[str, str]]:
        """``(apiVersion, kind)`` pairs this validator knows."""
        return set(self._schemas)

    def validate(self, obj: Mapping[str, Any]) -> list[str]:
        """Every problem found in ``obj``, as ``path: message`` strings; an empty list means valid."""
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        if key not in self._schemas:
            return [f"no CRD in {self.crd_dir} serves {key[0]} {key[1]}"]
        schema, scope = self._schemas[key]
        errors = self._metadata_errors(obj, scope)

        validator_cls = self._jsonschema.validators.validator_for(schema, default=self._jsonschema.Draft7Validator)
        validator = validator_cls(_strict(schema), format_checker=self._checker)
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path) or "."
            errors.append(f"{where}: {err.message}")
        if errors:
            return errors

        defaulted = _apply_defaults(schema, copy.deepcopy(dict(obj)))
        for sub, value, path in _walk(schema, defaulted, ""):
            errors.extend(self._list_errors(sub, value, path))
            for rule in sub.get("x-kubernetes-validations") or []:
                text = _normalise_rule(rule["rule"])
                if "oldSelf" in text:
                    continue
                check = _CEL.get(text)
                if check is None:
                    self.unevaluated_rules.add(text)
                    continue
                try:
                    ok = check(value)
                except (KeyError, TypeError, AttributeError, IndexError):
                    ok = False
                if not ok:
                    errors.append(f"{path or '.'}: {rule.get('message') or text}")
        return errors

    @staticmethod
    def _metadata_errors(obj: Mapping[str, Any], scope: str) -> list[str]:
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            return [".metadata: is required"]
        errors = []
        name = meta.get("name")
        if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
            errors.append(f".metadata.name: {name!r} is not a DNS-1123 subdomain")
        namespace = meta.get("namespace")
        if scope == "Namespaced" and not namespace:
            errors.append(".metadata.namespace: is required for a namespaced kind")
        if scope == "Cluster" and namespace:
            errors.append(".metadata.namespace: must not be set on a cluster-scoped kind")
        for field in ("labels", "annotations"):
            values = meta.get(field) or {}
            if not isinstance(values, Mapping) or not all(isinstance(v, str) for v in values.values()):
                errors.append(f".metadata.{field}: values must be strings")
        return errors

    @staticmethod
    def _list_errors(schema: Mapping[str, Any], value: Any, path: str) -> list[str]:
        if not isinstance(value, list):
            return []
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set" and not _unique(value):
            return [f"{path}: items of a set list must be unique"]
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, Mapping)]
            if not _unique(seen):
                return [f"{path}: duplicate entries for map keys {', '.join(keys)}"]
        return []


def assert_valid(validator: CRDValidator, objects: list[Mapping[str, Any]]) -> None:
    """Raise ``AssertionError`` naming every invalid object and its problems."""
    problems = []
    for obj in objects:
        errs = validator.validate(obj)
        if errs:
            name = (obj.get("metadata") or {}).get("name")
            problems.append(f"{obj.get('kind')} {name}: " + "; ".join(errs))
    if problems:
        raise AssertionError("\n".join(problems))
