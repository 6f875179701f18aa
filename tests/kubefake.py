"""A small Kubernetes API server for tests (threaded ``http.server``), and a tiny simulated Kueue.

:class:`FakeApi` speaks what the official Python client needs: get/list (label selectors; field selectors
on Events as the API server supports them), watch as a
chunked stream of JSON events from a resourceVersion (410 Gone once compacted), create (409 AlreadyExists),
replace with optimistic concurrency (409 Conflict), delete, JSON merge patch and server-side apply with
``managedFields`` per field manager on ``status`` (conflicts unless forced; an apply drops the fields its
manager owned and left out, unless another manager owns them too), and Kueue v0.19.2's Workload status
rules (``clusterName`` immutable, exclusive with ``nominatedClusterNames``, and set only to a nominated
cluster). Faults are injected per request (:meth:`FakeApi.fail`) and watches can be cut after N events.

:class:`FakeApi` can validate what is created as the API server does (``validate``: :func:`metadata_problems` for
every object, the pinned CRDs' schemas for custom resources; a refusal is 422 Invalid).

:class:`FakeKueue` plays Kueue on a hub and its workers: its job framework makes the Workload of each suspended
Job/JobSet with a queue-name label as Kueue v0.19.2 does (:func:`kueue_workload`: pod sets from the job's
template, priority from its WorkloadPriorityClass, maximum execution time from its label) and reserves hub quota
for it; MultiKueue copies a hub Workload to the workers in
its ``nominatedClusterNames``, each worker admits Workloads when its ClusterQueue's quota fits (priority,
then arrival; flavors in order), and the hub then records the admitting worker with its own
``kueue-admission`` apply (which clears the nomination only if that manager owns it), or evicts.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jsonhttp import JsonHandler

GVP = tuple[str, str, str]  # group, version, plural
WORKLOADS: GVP = ("kueue.x-k8s.io", "v1beta2", "workloads")
CLUSTERQUEUES: GVP = ("kueue.x-k8s.io", "v1beta2", "clusterqueues")
KUEUE_ADMISSION = "kueue-admission"
MAP_LISTS = {"conditions": "type", "admissionChecks": "name"}  # status lists keyed by a field (listType=map)
KINDS = {"workloads": "Workload", "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue",
         "resourceflavors": "ResourceFlavor", "admissionchecks": "AdmissionCheck",
         "multikueueclusters": "MultiKueueCluster", "multikueueconfigs": "MultiKueueConfig", "jobs": "Job",
         "jobsets": "JobSet", "leases": "Lease", "events": "Event", "secrets": "Secret", "configmaps": "ConfigMap",
         "persistentvolumes": "PersistentVolume", "persistentvolumeclaims": "PersistentVolumeClaim"}


# Field selectors the API server supports on core/v1 Events (pkg/apis/core/v1 field label conversion).
EVENT_FIELDS = ("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
                "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
                "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent", "source",
                "type")


def now_rfc3339(t: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if t is None else t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_doc(code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": message, "reason": reason, "code": code}
    if causes:
        doc["details"] = {"causes": causes}
    return doc


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.doc = status_doc(code, reason, message, causes)
        self.code = code


def leaves(status: dict[str, Any] | None) -> dict[tuple[str, ...], Any]:
    """The ownable units of a status: top-level fields, and each element of the keyed lists."""
    out: dict[tuple[str, ...], Any] = {}
    for k, v in (status or {}).items():
        if k in MAP_LISTS and isinstance(v, list):
            for item in v:
                out[(k, str(item.get(MAP_LISTS[k])))] = item
        else:
            out[(k,)] = v
    return out


def from_leaves(lv: dict[tuple[str, ...], Any], order: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for leaf, v in lv.items():
        if len(leaf) == 2:
            status.setdefault(leaf[0], []).append(v)
        elif v is not None:
            status[leaf[0]] = v
    return status


def path_of(leaf: tuple[str, ...]) -> str:
    return f".status.{leaf[0]}" + (f"[{MAP_LISTS[leaf[0]]}=\"{leaf[1]}\"]" if len(leaf) == 2 else "")


def fields_v1(fields: set[tuple[str, ...]]) -> dict[str, Any]:
    st: dict[str, Any] = {}
    for leaf in sorted(fields):
        if len(leaf) == 2:
            key = "k:" + json.dumps({MAP_LISTS[leaf[0]]: leaf[1]}, separators=(",", ":"))
            st.setdefault(f"f:{leaf[0]}", {})[key] = {}
        else:
            st[f"f:{leaf[0]}"] = {}
    return {"f:status": st}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


@dataclass
class Fault:
    method: str
    contains: str
    status: int
    times: int
    message: str = "injected failure"


@dataclass
class Raw:
    """A canned answer (any status, content type and body) for requests whose path contains ``contains``."""

    method: str
    contains: str
    status: int
    content_type: str
    body: bytes
    times: int


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    @property
    def agent(self) -> str:
        return self.headers.get("user-agent", "")


@dataclass
class _Event:
    rv: int
    gvp: GVP
    type: str
    obj: dict[str, Any]


@dataclass
class _Owned:
    op: str
    fields: set[tuple[str, ...]] = field(default_factory=set)
    time: str = ""


class FakeApi:
    """One fake API server (one cluster)."""

    def __init__(self, name: str, validate: Callable[[GVP, dict[str, Any]], list[str]] | None = None) -> None:
        self.name = name
        # What the API server checks on a create (field validation Strict, CRD schemas): problems refuse it (422).
        self.validate = validate
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 1000
        self.objects: dict[GVP, dict[tuple[str, str], dict[str, Any]]] = {}
        self.history: list[_Event] = []
        self.compacted = 0
        self.owners: dict[tuple[GVP, str, str], dict[str, _Owned]] = {}
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self.drop_watch_after: int | None = None  # cut every watch stream after this many events
        self.on_write: list[Callable[[], None]] = []
        self.applies: list[tuple[str, str, str, tuple[str, ...]]] = []  # API applies: (ns, name, agent, nominated)
        self.down = False
        self.raws: list[Raw] = []
        # Path substring -> "hang" (never answers) or "trickle" (one byte every TRICKLE_S, never complete).
        self.stalls: dict[str, str] = {}
        self.closing = threading.Event()
        api = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self, method: str) -> None:
                if api.down:
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                req = Request(method, parts.path, query, headers, body)
                with api.lock:
                    api.requests.append(req)
                    fault = next((f for f in api.faults if f.times > 0 and f.method == method
                                  and f.contains in parts.path), None)
                    if fault is not None:
                        fault.times -= 1
                    raw_answer = next((r for r in api.raws if r.times > 0 and r.method == method
                                       and r.contains in parts.path), None)
                    if raw_answer is not None:
                        raw_answer.times -= 1
                    stall = next((mode for part, mode in api.stalls.items() if part in parts.path), None)
                if stall is not None:
                    api._stall(self, stall)
                    return
                if raw_answer is not None:
                    self.send_response(raw_answer.status)
                    self.send_header("Content-Type", raw_answer.content_type)
                    self.send_header("Content-Length", str(len(raw_answer.body)))
                    self.end_headers()
                    self.wfile.write(raw_answer.body)
                    return
                if fault is not None:
                    reason = {409: "Conflict", 500: "InternalError", 503: "ServiceUnavailable"}.get(fault.status,
                                                                                                  "Failure")
                    self._reply(fault.status, status_doc(fault.status, reason, fault.message))
                    return
                try:
                    if method == "GET" and query.get("watch", [""])[0] in ("true", "1"):
                        api._watch(self, req)
                        return
                    code, doc = api.handle(req)
                except ApiError as exc:
                    code, doc = exc.code, exc.doc
                self._reply(code, doc)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PUT(self) -> None:
                self._handle("PUT")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"fake-{name}", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ plumbing

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def kubeconfig(self, token: str = "t0ken") -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Config", "current-context": self.name,
                "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": "u"}}]}

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    TRICKLE_S = 1.0

    def _stall(self, handler: BaseHTTPRequestHandler, mode: str) -> None:
        """Never answer (``hang``), or answer one byte every :attr:`TRICKLE_S` (``trickle``), until closed
        (at most two minutes)."""
        handler.close_connection = True
        until = time.monotonic() + 120
        try:
            if mode == "trickle":
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", "100000")
                handler.end_headers()
                handler.wfile.flush()
            while not self.closing.is_set() and time.monotonic() < until:
                if mode == "trickle":
                    handler.wfile.write(b" ")
                    handler.wfile.flush()
                self.closing.wait(self.TRICKLE_S)
        except OSError:
            pass

    def answer_raw(self, method: str, contains: str, status: int, content_type: str, body: bytes,
                   times: int = 1) -> None:
        """Answer the next ``times`` matching requests with exactly this (a login proxy's page, say)."""
        with self.lock:
            self.raws.append(Raw(method, contains, status, content_type, body, times))

    def fail(self, method: str, contains: str, status: int, times: int = 1) -> None:
        with self.lock:
            self.faults.append(Fault(method, contains, status, times))

    def compact(self) -> None:
        """Forget the watch history: a watch from an older resourceVersion gets 410 Gone."""
        with self.lock:
            self.compacted = self.rv
            self.history.clear()

    @staticmethod
    def parse(path: str) -> tuple[GVP, str, str | None, bool]:
        """(group/version/plural, namespace, name, status subresource) of a request path."""
        p = path.strip("/").split("/")
        if p[0] == "api":
            group, version, rest = "", p[1], p[2:]
        else:
            group, version, rest = p[1], p[2], p[3:]
        ns = ""
        if rest and rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        return (group, version, plural), ns, name, len(rest) > 2 and rest[2] == "status"

    def _commit(self, gvp: GVP, obj: dict[str, Any], kind: str) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if kind == "DELETED":
            self.objects.get(gvp, {}).pop(key, None)
            self.owners.pop((gvp, *key), None)
        else:
            self.objects.setdefault(gvp, {})[key] = obj
        self.history.append(_Event(self.rv, gvp, kind, copy.deepcopy(obj)))
        self.cond.notify_all()
        for hook in self.on_write:
            hook()
        return copy.deepcopy(obj)

    def get(self, gvp: GVP, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get(gvp, {}).get((ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, gvp: GVP) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.objects.get(gvp, {}).values()]

    def create(self, gvp: GVP, obj: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            key = (meta.get("namespace") or "", meta["name"])
            if key in self.objects.get(gvp, {}):
                raise ApiError(409, "AlreadyExists", f'{gvp[2]} "{meta["name"]}" already exists')
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta.setdefault("generation", 1)
            obj.setdefault("kind", KINDS.get(gvp[2], gvp[2]))
            obj.setdefault("apiVersion", f"{gvp[0]}/{gvp[1]}" if gvp[0] else gvp[1])
            problems = self.validate(gvp, obj) if self.validate is not None else []
            if problems:
                raise ApiError(422, "Invalid", f'{obj["kind"]}.{gvp[0] or "core"} "{meta["name"]}" is invalid: '
                                               + "; ".join(problems[:5]),
                               [{"reason": "FieldValueInvalid", "message": p} for p in problems[:5]])
            return self._commit(gvp, obj, "ADDED")

    def delete(self, gvp: GVP, ns: str, name: str) -> None:
        with self.lock:
            obj = self.objects.get(gvp, {}).get((ns, name))
            if obj is not None:
                self._commit(gvp, copy.deepcopy(obj), "DELETED")

    def set_status(self, gvp: GVP, ns: str, name: str, status: dict[str, Any]) -> None:
        """Write a status as the cluster's own controllers would (no field manager bookkeeping)."""
        with self.lock:
            obj = copy.deepcopy(self.objects[gvp][(ns, name)])
            obj["status"] = status
            self._commit(gvp, obj, "MODIFIED")

    # ------------------------------------------------------------------ status writes with field managers

    def _owners(self, gvp: GVP, ns: str, name: str) -> dict[str, _Owned]:
        return self.owners.setdefault((gvp, ns, name), {})

    def _render_managed(self, obj: dict[str, Any], owners: dict[str, _Owned], gvp: GVP) -> None:
        obj["metadata"]["managedFields"] = [
            {"manager": m, "operation": o.op, "apiVersion": f"{gvp[0]}/{gvp[1]}", "time": o.time,
             "fieldsType": "FieldsV1", "fieldsV1": fields_v1(o.fields), "subresource": "status"}
            for m, o in owners.items() if o.fields]

    def _validate(self, gvp: GVP, old: dict[str, Any], new_status: dict[str, Any]) -> None:
        if gvp != WORKLOADS:
            return
        name = old["metadata"]["name"]
        old_st = old.get("status") or {}
        cluster, old_cluster = new_status.get("clusterName"), old_st.get("clusterName")
        invalid = None
        if old_cluster and cluster and cluster != old_cluster:
            invalid = "clusterName is immutable once set"
        elif cluster and new_status.get("nominatedClusterNames"):
            invalid = "clusterName and nominatedClusterNames are mutually exclusive"
        elif cluster and not old_cluster and cluster not in (old_st.get("nominatedClusterNames") or []):
            invalid = "when setting clusterName it must be one of the nominatedClusterNames"
        if invalid:
            raise ApiError(422, "Invalid", f'Workload.kueue.x-k8s.io "{name}" is invalid: status: Invalid value: '
                                           f'"object": {invalid}')

    def apply_status(self, gvp: GVP, ns: str, name: str, body: dict[str, Any], manager: str,
                     force: bool, agent: str = "") -> dict[str, Any]:
        with self.lock:
            cur_obj = self.objects.get(gvp, {}).get((ns, name))
            if cur_obj is None:
                raise ApiError(404, "NotFound", f'{gvp[2]} "{name}" not found')
            meta = body.get("metadata") or {}
            if meta.get("uid") and meta["uid"] != cur_obj["metadata"]["uid"]:
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition does not match")
            if meta.get("resourceVersion") and meta["resourceVersion"] != cur_obj["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {gvp[2]}.{gvp[0]} "{name}": the '
                                                "object has been modified; please apply your changes to the latest "
                                                "version and try again")
            owners = self._owners(gvp, ns, name)
            cur = leaves(cur_obj.get("status"))
            new = leaves(body.get("status"))
            conflicts = {leaf: m for leaf in new for m, o in owners.items()
                         if m != manager and leaf in o.fields and cur.get(leaf) != new[leaf]}
            if conflicts and not force:
                causes = [{"type": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": path_of(leaf)}
                          for leaf, m in conflicts.items()]
                first = next(iter(conflicts.items()))
                raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict"
                                                f"{'s' if len(conflicts) > 1 else ''}: conflict with \"{first[1]}\" "
                                                f"using {gvp[0]}/{gvp[1]}: {path_of(first[0])}", causes)
            for leaf, m in conflicts.items():
                owners[m].fields.discard(leaf)
            prev = owners.get(manager, _Owned("Apply")).fields
            result = dict(cur)
            for leaf in prev - set(new):
                if not any(leaf in o.fields for m, o in owners.items() if m != manager):
                    result.pop(leaf, None)
            result.update(new)
            new_status = from_leaves(result)
            self._validate(gvp, cur_obj, new_status)
            owners[manager] = _Owned("Apply", set(new), now_rfc3339())
            obj = copy.deepcopy(cur_obj)
            obj["status"] = new_status
            self._render_managed(obj, owners, gvp)
            if agent:
                self.applies.append((ns, name, agent, tuple(new_status.get("nominatedClusterNames") or ())))
            return self._commit(gvp, obj, "MODIFIED")

    def merge_status(self, gvp: GVP, ns: str, name: str, patch: dict[str, Any], manager: str) -> dict[str, Any]:
        with self.lock:
            cur_obj = self.objects.get(gvp, {}).get((ns, name))
            if cur_obj is None:
                raise ApiError(404, "NotFound", f'{gvp[2]} "{name}" not found')
            new_status = merge_patch(cur_obj.get("status") or {}, (patch or {}).get("status") or {})
            self._validate(gvp, cur_obj, new_status)
            owners = self._owners(gvp, ns, name)
            cur, new = leaves(cur_obj.get("status")), leaves(new_status)
            changed = {leaf for leaf in set(cur) | set(new) if cur.get(leaf) != new.get(leaf)}
            for o in owners.values():
                o.fields -= changed
            mine = owners.setdefault(manager, _Owned("Update"))
            mine.fields |= {leaf for leaf in changed if leaf in new}
            mine.time = now_rfc3339()
            obj = copy.deepcopy(cur_obj)
            obj["status"] = new_status
            self._render_managed(obj, owners, gvp)
            return self._commit(gvp, obj, "MODIFIED")

    # ------------------------------------------------------------------ request handling

    def handle(self, req: Request) -> tuple[int, Any]:
        gvp, ns, name, status = self.parse(req.path)
        if req.method == "GET":
            if name is None:
                return 200, self._list(gvp, ns, req.query)
            obj = self.get(gvp, ns, name)
            if obj is None:
                raise ApiError(404, "NotFound", f'{gvp[2]} "{name}" not found')
            return 200, obj
        if req.method == "POST":
            body = dict(req.body or {})
            body.setdefault("metadata", {})
            if ns:
                body["metadata"]["namespace"] = ns
            return 201, self.create(gvp, body)
        assert name is not None
        if req.method == "DELETE":
            self.delete(gvp, ns, name)
            return 200, status_doc(200, "", "deleted") | {"status": "Success"}
        if req.method == "PUT":
            with self.lock:
                cur = self.objects.get(gvp, {}).get((ns, name))
                if cur is None:
                    raise ApiError(404, "NotFound", f'{gvp[2]} "{name}" not found')
                body = copy.deepcopy(req.body)
                rv = (body.get("metadata") or {}).get("resourceVersion")
                if rv and rv != cur["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {gvp[2]} "{name}": the object '
                                                    "has been modified; please apply your changes to the latest "
                                                    "version and try again")
                for k in ("uid", "creationTimestamp", "namespace", "name"):
                    if k in cur["metadata"]:
                        body["metadata"][k] = cur["metadata"][k]
                return 200, self._commit(gvp, body, "MODIFIED")
        if req.method == "PATCH":
            ctype = req.headers.get("content-type", "")
            manager = req.query.get("fieldManager", [req.agent.split("/")[0] or "unknown"])[0]
            if not status:
                with self.lock:
                    cur = self.objects.get(gvp, {}).get((ns, name))
                    if cur is None:
                        raise ApiError(404, "NotFound", f'{gvp[2]} "{name}" not found')
                    return 200, self._commit(gvp, merge_patch(cur, req.body), "MODIFIED")
            if ctype.startswith("application/apply-patch"):
                if "fieldManager" not in req.query:
                    raise ApiError(400, "BadRequest", "fieldManager is required for apply requests")
                force = req.query.get("force", ["false"])[0] == "true"
                return 200, self.apply_status(gvp, ns, name, req.body or {}, manager, force, req.agent or "?")
            return 200, self.merge_status(gvp, ns, name, req.body or {}, manager)
        raise ApiError(405, "MethodNotAllowed", req.method)

    @staticmethod
    def _selected(obj: dict[str, Any], selector: str | None) -> bool:
        if not selector:
            return True
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for term in selector.split(","):
            k, eq, v = term.partition("=")
            if (eq and labels.get(k) != v) or (not eq and k not in labels):
                return False
        return True

    @staticmethod
    def _field_terms(gvp: GVP, selector: str | None) -> list[tuple[str, bool, str]]:
        """``(label, equal, value)`` terms of a field selector; a label the API server does not support for the
        resource is refused as it refuses it (400). Events: the labels of core/v1's field label conversion."""
        terms = []
        for term in (selector or "").split(","):
            if not term:
                continue
            neg = "!=" in term
            label, _, value = term.partition("!=" if neg else "==" if "==" in term else "=")
            allowed = EVENT_FIELDS if gvp == ("", "v1", "events") else ("metadata.name", "metadata.namespace")
            if label not in allowed:
                raise ApiError(400, "BadRequest", f'Unable to find "{gvp[1]}, Resource={gvp[2]}" that match label '
                                                  f"selector \"\", field selector \"{selector}\": field label not "
                                                  f"supported: {label}")
            terms.append((label, not neg, value))
        return terms

    @staticmethod
    def _field(obj: dict[str, Any], label: str) -> str:
        if label == "source":  # the API server's event field: source.component, else reportingComponent
            return str((obj.get("source") or {}).get("component") or obj.get("reportingComponent") or "")
        value: Any = obj
        for part in label.split("."):
            value = (value or {}).get(part) if isinstance(value, dict) else None
        return "" if value is None else str(value)

    def _list(self, gvp: GVP, ns: str, query: dict[str, list[str]]) -> dict[str, Any]:
        selector = query.get("labelSelector", [None])[0]
        fields = self._field_terms(gvp, query.get("fieldSelector", [None])[0])
        with self.lock:
            items = [copy.deepcopy(o) for (ons, _), o in sorted(self.objects.get(gvp, {}).items())
                     if (not ns or ons == ns) and self._selected(o, selector)
                     and all((self._field(o, label) == value) == eq for label, eq, value in fields)]
            rv = str(self.rv)
        kind = KINDS.get(gvp[2], gvp[2])
        return {"apiVersion": f"{gvp[0]}/{gvp[1]}" if gvp[0] else gvp[1], "kind": f"{kind}List",
                "metadata": {"resourceVersion": rv}, "items": items}

    def _watch(self, handler: BaseHTTPRequestHandler, req: Request) -> None:
        gvp, ns, _, _ = self.parse(req.path)
        selector = req.query.get("labelSelector", [None])[0]
        since = int(req.query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(req.query.get("timeoutSeconds", ["30"])[0])
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def chunk(doc: Any) -> None:
            data = (json.dumps(doc) + "\n").encode()
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        deadline = time.monotonic() + timeout
        sent = 0
        try:
            with self.lock:
                gone = since < self.compacted
            if gone:
                chunk({"type": "ERROR", "object": status_doc(410, "Expired", f"too old resource version: {since} "
                                                                             f"({self.compacted})")})
            else:
                last = since
                while time.monotonic() < deadline and not self.down:
                    with self.cond:
                        if last < self.compacted:  # events this watcher had not seen were compacted away
                            chunk({"type": "ERROR", "object": status_doc(
                                410, "Expired", f"too old resource version: {last} ({self.compacted})")})
                            break
                        events = [e for e in self.history if e.rv > last and e.gvp == gvp
                                  and (not ns or e.obj["metadata"].get("namespace") == ns)
                                  and self._selected(e.obj, selector)]
                        if not events:
                            newest = self.history[-1].rv if self.history else last
                            last = max(last, newest)
                            self.cond.wait(min(0.25, max(deadline - time.monotonic(), 0.01)))
                            continue
                    for e in events:
                        chunk({"type": e.type, "object": e.obj})
                        last = e.rv
                        sent += 1
                        if self.drop_watch_after is not None and sent >= self.drop_watch_after:
                            handler.close_connection = True
                            handler.connection.shutdown(socket.SHUT_RDWR)  # cut mid-stream, no final chunk
                            return
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except OSError:
            handler.close_connection = True


# ------------------------------------------------------------------------------- what the API server validates

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
TOTAL_ANNOTATION_BYTES = 256 * 1024  # apimachinery ValidateAnnotations: TotalAnnotationSizeLimitB


def _qualified_name_problem(key: str) -> str | None:
    """apimachinery validation.IsQualifiedName: an optional DNS-1123 subdomain prefix and ``/``, then a name of
    at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"prefix of {key!r} is not a DNS-1123 subdomain"
    if not name or len(name) > 63 or not _QUALIFIED.fullmatch(name):
        return f"name part of {key!r} is not a qualified name"
    return None


def metadata_problems(obj: Mapping[str, Any]) -> list[str]:
    """What the API server refuses in any object's metadata (apimachinery ``ValidateObjectMeta``): a name that is
    not a DNS-1123 subdomain, annotation keys that are not qualified names, non-string annotation values and more
    than 256 KiB of them in all, label keys and values that are not valid."""
    meta = obj.get("metadata") or {}
    problems = []
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        problems.append(f"metadata.name: {str(name)[:60]!r} is not a DNS-1123 subdomain")
    annotations = meta.get("annotations") or {}
    total = 0
    for key, value in annotations.items():
        if (why := _qualified_name_problem(str(key))) is not None:
            problems.append(f"metadata.annotations: {why}")
        if not isinstance(value, str):
            problems.append(f"metadata.annotations[{key}]: must be a string")
            continue
        total += len(str(key)) + len(value.encode())
    if total > TOTAL_ANNOTATION_BYTES:
        problems.append(f"metadata.annotations: Too long: must have at most {TOTAL_ANNOTATION_BYTES} bytes")
    for key, value in (meta.get("labels") or {}).items():
        if (why := _qualified_name_problem(str(key))) is not None:
            problems.append(f"metadata.labels: {why}")
        if not isinstance(value, str) or (value and (len(value) > 63 or not _QUALIFIED.fullmatch(value))):
            problems.append(f"metadata.labels[{key}]: {str(value)[:70]!r} is not a valid label value")
    return problems


# ---------------------------------------------------------------------------------------------- Kueue

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBS: GVP = ("batch", "v1", "jobs")
JOBSETS: GVP = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
PRIORITY_CLASSES: GVP = ("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses")


def _pods_per_job(spec: Mapping[str, Any]) -> int:
    """A Job's pods at once: parallelism (default 1), at most completions (Kueue's podsCount)."""
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    return min(parallelism, int(completions)) if completions is not None else parallelism


def _topology_request(template: Mapping[str, Any], replicas: int | None) -> dict[str, Any] | None:
    preferred = ((template.get("metadata") or {}).get("annotations") or {}).get(PREFERRED_TOPOLOGY)
    if not preferred:
        return None
    request: dict[str, Any] = {"preferred": preferred, "podIndexLabel": COMPLETION_INDEX}
    if replicas is not None:
        request.update(subGroupIndexLabel="jobset.sigs.k8s.io/job-index", subGroupCount=replicas)
    return request


def kueue_workload(job: Mapping[str, Any], priorities: Mapping[str, int]) -> dict[str, Any]:
    """The Workload Kueue v0.19.2's job framework makes for a Job or JobSet (``pkg/controller/jobs/job``,
    ``jobs/jobset``, ``jobframework.ConstructWorkload``): one pod set ``main`` of parallelism (at most completions)
    pods for a Job, one per replicated job of replicas × that for a JobSet, each with the job's pod template; the
    queue from the ``queue-name`` label, the priority from the WorkloadPriorityClass its ``priority-class`` label
    names (``priorities``: name -> value), the maximum execution time from its label, owned by the job. Named
    ``<kind>-<job>`` (Kueue adds a hash of the job's uid, left out so tests can name it)."""
    meta = job["metadata"]
    labels = meta.get("labels") or {}
    kind, spec = job["kind"], job["spec"]
    if kind == "Job":
        sets = [{"name": "main", "count": _pods_per_job(spec), "template": copy.deepcopy(spec["template"])}]
        if (tr := _topology_request(spec["template"], None)) is not None:
            sets[0]["topologyRequest"] = tr
    else:
        sets = []
        for rj in spec["replicatedJobs"]:
            template = rj["template"]["spec"]["template"]
            ps = {"name": rj["name"], "count": int(rj.get("replicas", 1)) * _pods_per_job(rj["template"]["spec"]),
                  "template": copy.deepcopy(template)}
            if (tr := _topology_request(template, int(rj.get("replicas", 1)))) is not None:
                ps["topologyRequest"] = tr
            sets.append(ps)
    wl_spec: dict[str, Any] = {"queueName": labels.get(QUEUE_LABEL, ""), "podSets": sets, "active": True}
    if labels.get(PRIORITY_CLASS_LABEL):
        name = labels[PRIORITY_CLASS_LABEL]
        wl_spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": name}
        wl_spec["priority"] = int(priorities[name])
    if labels.get(MAX_EXEC_LABEL):
        wl_spec["maximumExecutionTimeSeconds"] = int(labels[MAX_EXEC_LABEL])
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"{kind.lower()}-{meta['name']}", "namespace": meta["namespace"],
                         "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                         "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": kind, "name": meta["name"],
                                              "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": wl_spec}


_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, defined: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of an env value (``third_party/forked/golang/expansion``): a variable
    defined before is replaced, ``$$`` is ``$``, an undefined reference is left as it is."""
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return defined.get(m.group(1), m.group(0))

    return _REFERENCE.sub(one, text)


def container_env(container: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]],
                  pod_annotations: Mapping[str, str]) -> dict[str, str]:
    """The environment the kubelet gives ``container``: its ``envFrom`` ConfigMaps first (``config_maps``: name ->
    data; an optional one that is missing adds nothing), then ``env`` in order, each value ``$(VAR)``-expanded
    against what is defined so far, ``fieldRef`` of ``metadata.annotations['...']`` read from
    ``pod_annotations`` (a JobSet pod's completion index)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = source.get("configMapRef") or {}
        data = config_maps.get(ref.get("name", ""))
        if data is None:
            assert ref.get("optional"), f"ConfigMap {ref.get('name')} is missing and not optional"
            continue
        env.update({str(k): str(v) for k, v in data.items()})
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = expand(str(var["value"]), env)
            continue
        path = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        m = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path)
        assert m, f"{var['name']}: valueFrom {var.get('valueFrom')} is not modelled here"
        env[var["name"]] = pod_annotations.get(m.group(1), "")
    return env


def _cond(kind: str, status: str, reason: str, message: str = "", t: float | None = None) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now_rfc3339(t), "observedGeneration": 1}


def _quantity(v: Any) -> float:
    s = str(v)
    for suf, scale in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40)):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * scale
    if s.endswith("m"):
        return float(s[:-1]) / 1000
    return float(s)


def pod_gpus(template: dict[str, Any]) -> int:
    return sum(int(_quantity(((c.get("resources") or {}).get("requests") or {}).get("nvidia.com/gpu", 0)))
               for c in (template.get("spec") or {}).get("containers") or [])


def reserved_status(wl: Mapping[str, Any], cluster_queue: str, flavor: str, check: str) -> dict[str, Any]:
    """A Workload's status once its quota is reserved in ``cluster_queue`` on ``flavor`` with admission check
    ``check`` Pending: what a hub Workload waiting for the dispatcher's nomination holds."""
    sets = []
    for ps in wl["spec"]["podSets"]:
        tmpl = ps["template"]
        req = ((tmpl["spec"]["containers"][0].get("resources") or {}).get("requests") or {})
        usage = {k: str(int(_quantity(v) * ps["count"] * (1000 if k == "cpu" else 1))) + ("m" if k == "cpu" else "")
                 for k, v in req.items() if k != "memory"}
        if "memory" in req:
            usage["memory"] = f"{int(_quantity(req['memory']) * ps['count'] / 2**20)}Mi"
        sets.append({"name": ps["name"], "count": ps["count"], "resourceUsage": usage,
                     "flavors": {k: flavor for k in req}})
    return {"admission": {"clusterQueue": cluster_queue, "podSetAssignments": sets},
            "conditions": [_cond("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in {cluster_queue}")],
            "admissionChecks": [{"name": check, "state": "Pending", "message": "",
                                 "lastTransitionTime": now_rfc3339()}]}


class FakeKueue:
    """Kueue on ``hub`` and ``workers`` (key -> FakeApi), stepped by a background thread."""

    def __init__(self, hub: FakeApi, workers: dict[str, FakeApi], check: str = "all-workers") -> None:
        self.hub = hub
        self.workers = workers
        self.check = check
        self.admit: dict[str, bool] = {k: True for k in workers}  # False: the worker never admits
        self.failures: list[str] = []  # hub applies the API server refused (e.g. the nomination it cannot clear)
        self.admissions: list[tuple[str, str]] = []  # (workload, worker) in the order the hub recorded them
        self.flavor = "aws-use1-p5-spot"  # the hub flavor its quota is reserved in
        self._jobs_lock = threading.Lock()
        self._stop = threading.Event()
        self._kick = threading.Event()
        for api in (hub, *workers.values()):
            api.on_write.append(self._kick.set)
        self.thread = threading.Thread(target=self._run, name="fake-kueue", daemon=True)

    def start(self) -> FakeKueue:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self.thread.ident is not None:
            self.thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._kick.wait(0.05)
            self._kick.clear()
            try:
                self.step()
            except Exception as exc:  # keep stepping: a test asserts on the outcome
                self.failures.append(f"step: {exc!r}")

    # ---------------------------------------------------------------- hub

    def workload_for(self, job: Mapping[str, Any]) -> str:
        """Kueue's job reconciler for a suspended Job/JobSet on the hub that names a queue: its Workload
        (:func:`kueue_workload`) created and its hub quota reserved, once; the Workload's name."""
        meta = job["metadata"]
        name = f"{job['kind'].lower()}-{meta['name']}"
        with self._jobs_lock:
            if self.hub.get(WORKLOADS, meta["namespace"], name) is not None:
                return name
            priorities = {str(p["metadata"]["name"]): int(p["value"]) for p in self.hub.list(PRIORITY_CLASSES)}
            wl = self.hub.create(WORKLOADS, kueue_workload(job, priorities))
            self.reserve(wl, self.flavor)
        return name

    def _reconcile_jobs(self) -> None:
        for gvp in (JOBS, JOBSETS):
            for job in self.hub.list(gvp):
                if QUEUE_LABEL in ((job.get("metadata") or {}).get("labels") or {}) and (job.get("spec") or {}).get(
                        "suspend"):
                    self.workload_for(job)

    def reserve(self, wl: dict[str, Any], flavor: str) -> None:
        """The hub reserves quota for a new Workload (as the scheduler does, field manager kueue-admission)."""
        meta = wl["metadata"]
        status = reserved_status(wl, self.check, flavor, self.check)
        self.hub.apply_status(WORKLOADS, meta["namespace"], meta["name"], {"status": status}, KUEUE_ADMISSION, True)

    def _admission_apply(self, wl: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> bool:
        """Kueue's PatchAdmissionStatus: its whole admission status, changed, applied as kueue-admission."""
        st = copy.deepcopy(wl.get("status") or {})
        change(st)
        if st.pop("_clear", False) or st.get("clusterName"):
            st.pop("nominatedClusterNames", None)  # Kueue sets it to nil: absent from its apply
        meta = wl["metadata"]
        try:
            self.hub.apply_status(WORKLOADS, meta["namespace"], meta["name"], {"status": st}, KUEUE_ADMISSION, True)
            return True
        except ApiError as exc:
            self.failures.append(f"{meta['name']}: {exc}")
            return False

    def evict(self, worker: str, ns: str, name: str) -> None:
        """The worker evicts its copy (say pods-ready timeout on a spot scale-up); the hub resets and requeues."""
        self.workers[worker].delete(WORKLOADS, ns, name)
        wl = self.hub.get(WORKLOADS, ns, name)
        assert wl is not None

        def change(st: dict[str, Any]) -> None:
            st.pop("clusterName", None)
            st["_clear"] = True
            conds = {c["type"]: c for c in st.get("conditions") or []}
            conds["Evicted"] = _cond("Evicted", "False", "QuotaReserved", "Previously: evicted on worker")
            conds["Admitted"] = _cond("Admitted", "False", "NoReservation")
            conds["QuotaReserved"] = _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved again")
            st["conditions"] = list(conds.values())
            st["admissionChecks"] = [{"name": self.check, "state": "Pending",
                                      "message": "Reset to Pending after eviction. Previously: Retry",
                                      "lastTransitionTime": now_rfc3339()}]
            ev = (st.get("schedulingStats") or {}).get("evictions") or []
            count = sum(e.get("count", 0) for e in ev) + 1
            st["schedulingStats"] = {"evictions": [{"reason": "AdmissionCheck", "underlyingCause": "", "count": count}]}

        self._admission_apply(wl, change)

    def step(self) -> None:
        self._reconcile_jobs()
        for wl in self.hub.list(WORKLOADS):
            st = wl.get("status") or {}
            meta = wl["metadata"]
            key = (meta["namespace"], meta["name"])
            nominated = st.get("nominatedClusterNames") or []
            cluster = st.get("clusterName")
            remotes = {k: api.get(WORKLOADS, *key) for k, api in self.workers.items()}
            targets = [cluster] if cluster else nominated
            for k, api in self.workers.items():
                if k in targets and remotes[k] is None and not cluster:
                    api.create(WORKLOADS, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                           "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                                                        "labels": {"kueue.x-k8s.io/multikueue-origin": "hub"}},
                                           "spec": copy.deepcopy(wl["spec"])})
                elif k not in targets and remotes[k] is not None:
                    api.delete(WORKLOADS, *key)
            if cluster:
                continue
            admitted = next((k for k in nominated if remotes.get(k) is not None and any(
                c["type"] == "QuotaReserved" and c["status"] == "True"
                for c in (remotes[k].get("status") or {}).get("conditions") or [])), None)
            if admitted is None:
                continue

            def change(s: dict[str, Any], worker: str = admitted) -> None:
                s["clusterName"] = worker
                s["admissionChecks"] = [{"name": self.check, "state": "Ready",
                                         "message": f'The workload was admitted on "{worker}"',
                                         "lastTransitionTime": now_rfc3339()}]
                conds = {c["type"]: c for c in s.get("conditions") or []}
                conds["Admitted"] = _cond("Admitted", "True", "Admitted", "The workload is admitted")
                s["conditions"] = list(conds.values())

            if self._admission_apply(wl, change):
                self.admissions.append((meta["name"], admitted))
        for k, api in self.workers.items():
            if self.admit.get(k, True):
                self._admit_on(api)

    # ---------------------------------------------------------------- a worker

    def _admit_on(self, api: FakeApi) -> None:
        queues = {(q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
                  for q in api.list(("kueue.x-k8s.io", "v1beta2", "localqueues"))}
        cqs = {c["metadata"]["name"]: c for c in api.list(CLUSTERQUEUES)}
        pools = {f["metadata"]["name"]: ((f.get("spec") or {}).get("nodeLabels") or {}).get("gpufleet.io/pool")
                 for f in api.list(("kueue.x-k8s.io", "v1beta2", "resourceflavors"))}
        wls = api.list(WORKLOADS)
        used: dict[tuple[str, str], int] = {}
        for w in wls:
            adm = (w.get("status") or {}).get("admission")
            if adm:
                for a in adm["podSetAssignments"]:
                    f = next(iter(a["flavors"].values()))
                    used[(adm["clusterQueue"], f)] = used.get((adm["clusterQueue"], f), 0) + int(
                        _quantity(a["resourceUsage"].get("nvidia.com/gpu", 0)))
        pending = [w for w in wls if not (w.get("status") or {}).get("admission")]
        pending.sort(key=lambda w: (-(w["spec"].get("priority") or 0), w["metadata"]["creationTimestamp"],
                                    w["metadata"]["resourceVersion"]))
        changed = False
        for w in pending:
            cq_name = queues.get((w["metadata"]["namespace"], w["spec"].get("queueName")))
            cq = cqs.get(cq_name or "")
            if cq is None:
                continue
            need = sum(pod_gpus(ps["template"]) * ps["count"] for ps in w["spec"]["podSets"])
            allowed = self._allowed_pools(w)
            for group in cq["spec"]["resourceGroups"]:
                for f in group["flavors"]:
                    if allowed is not None and pools.get(f["name"]) not in allowed:
                        continue
                    if need > self._room(cqs, used, str(cq_name), f["name"]):
                        continue
                    used[(cq_name, f["name"])] = used.get((cq_name, f["name"]), 0) + need
                    sets = [{"name": ps["name"], "count": ps["count"],
                             "flavors": {"nvidia.com/gpu": f["name"]},
                             "resourceUsage": {"nvidia.com/gpu": str(pod_gpus(ps["template"]) * ps["count"])}}
                            for ps in w["spec"]["podSets"]]
                    api.apply_status(WORKLOADS, w["metadata"]["namespace"], w["metadata"]["name"], {"status": {
                        "admission": {"clusterQueue": cq_name, "podSetAssignments": sets},
                        "conditions": [_cond("QuotaReserved", "True", "QuotaReserved"),
                                       _cond("Admitted", "True", "Admitted")]}}, KUEUE_ADMISSION, True)
                    changed = True
                    break
                else:
                    continue
                break
        if changed or pending:
            for name, cq in cqs.items():
                reservation = [{"name": f["name"], "resources": [
                    {"name": "nvidia.com/gpu", "total": str(used.get((name, f["name"]), 0)), "borrowed": str(max(
                        0, used.get((name, f["name"]), 0) - (self._gpu_quota(cq, f["name"], "nominalQuota") or 0)))}]}
                    for g in cq["spec"]["resourceGroups"] for f in g["flavors"]]
                if (cq.get("status") or {}).get("flavorsReservation") != reservation:
                    api.set_status(CLUSTERQUEUES, "", name, {"flavorsReservation": reservation,
                                                             "flavorsUsage": reservation})

    @staticmethod
    def _gpu_quota(cq: dict[str, Any], flavor: str, field: str) -> int | None:
        for g in cq["spec"]["resourceGroups"]:
            for f in g["flavors"]:
                for r in f["resources"] if f["name"] == flavor else ():
                    if r["name"] == "nvidia.com/gpu" and r.get(field) is not None:
                        return int(_quantity(r[field]))
        return None

    def _room(self, cqs: dict[str, dict[str, Any]], used: dict[tuple[str, str], int], name: str, flavor: str) -> int:
        """GPUs queue ``name`` can admit on ``flavor`` now: Kueue's available quota in a cohort without lending
        limits (what every queue of the cohort has and does not use), capped by the queue's borrowing limit."""
        cq = cqs[name]
        own = (self._gpu_quota(cq, flavor, "nominalQuota") or 0) - used.get((name, flavor), 0)
        cohort = cq["spec"].get("cohortName")
        if not cohort:
            return own
        members = [n for n, c in cqs.items() if c["spec"].get("cohortName") == cohort]
        free = sum((self._gpu_quota(cqs[n], flavor, "nominalQuota") or 0) - used.get((n, flavor), 0)
                   for n in members)
        limit = self._gpu_quota(cq, flavor, "borrowingLimit")
        return free if limit is None else min(free, own + limit)

    @staticmethod
    def _allowed_pools(w: dict[str, Any]) -> set[str] | None:
        for ps in w["spec"]["podSets"]:
            aff = ((ps["template"].get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
            terms = (aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
            for t in terms:
                for e in t.get("matchExpressions") or []:
                    if e.get("key") == "gpufleet.io/pool" and e.get("operator") == "In":
                        return set(e["values"])
        return None


def secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll until ``predicate()`` is truthy; its value, or an AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")
        time.sleep(interval)


def iter_requests(api: FakeApi, method: str, contains: str) -> Iterator[Request]:
    with api.lock:
        reqs = list(api.requests)
    return (r for r in reqs if r.method == method and contains in r.path)
