"""Kubernetes RBAC, small: which rendered rules allow a request a fake API server logged.

A request becomes request attributes as the API server's RequestInfo resolver derives them: the verb from
the HTTP method (``GET`` one object: get, a collection: list, ``?watch=true``: watch; ``POST`` create,
``PUT`` update, ``PATCH`` patch, ``DELETE`` delete), the API group, the resource with its subresource
(``workloads/status``), the namespace and the object's name. A PolicyRule allows it when its apiGroups,
resources and verbs match (``*`` matches all) and, if it lists resourceNames, the request names one of them
(so such a rule never allows create, list or watch). A ClusterRole bound by a ClusterRoleBinding applies in
every namespace; a Role only in its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubefake import FakeApi, Request


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str  # with its subresource: "workloads/status"
    namespace: str
    name: str

    @property
    def kind(self) -> tuple[str, str, str]:
        return self.group, self.resource, self.verb


def attributes(req: Request) -> Attributes:
    (group, _, plural), ns, name, status = FakeApi.parse(req.path)
    if req.method == "GET":
        verb = "watch" if req.query.get("watch", [""])[0] in ("true", "1") else "get" if name else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[req.method]
    return Attributes(verb, group, plural + ("/status" if status else ""), ns, name or "")


def _matches(rule: Mapping[str, Any], a: Attributes) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    names = rule.get("resourceNames") or []
    return (has("apiGroups", a.group) and has("resources", a.resource) and has("verbs", a.verb)
            and (not names or (bool(a.name) and a.name in names)))


@dataclass(frozen=True)
class Authorizer:
    """Rules of ClusterRoles (bound cluster-wide) and of Roles by their namespace."""

    cluster: Sequence[Mapping[str, Any]]
    namespaced: Mapping[str, Sequence[Mapping[str, Any]]]

    def allows(self, a: Attributes) -> bool:
        rules = [*self.cluster, *self.namespaced.get(a.namespace, ())] if a.namespace else list(self.cluster)
        return any(_matches(r, a) for r in rules)

    def granted(self) -> set[tuple[str, str, str]]:
        """Every (group, resource, verb) some rule grants."""
        rules = [*self.cluster, *(r for rs in self.namespaced.values() for r in rs)]
        return {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}


def calls(requests: Iterable[Request]) -> list[Attributes]:
    return [attributes(r) for r in requests]
