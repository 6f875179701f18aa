"""The thin Kubernetes adapter shared by ``placement submit`` and ``placement dispatch``.

Everything goes through the official ``kubernetes`` client (imported on first use): an ``ApiClient`` per
cluster built from a kubeconfig (a stack output, a file, or the pod's in-cluster service account) without
touching the process-wide default; object creation; Workload status server-side apply; Events; and
:class:`Informer`, a list + watch cache on ``kubernetes.watch.Watch`` that resumes from the last
resourceVersion, re-lists on 410 Gone and survives dropped connections and 5xx answers.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement.fleet.errors import EXIT_BAD_INPUT, EXIT_FAILED, FleetError
from placement.fleet.manifests import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

API_TIMEOUT_S = 30.0
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
APPLY_PATCH = "application/apply-patch+yaml"

log = logging.getLogger("gpufleet.kube")


def kubeconfig_doc(value: Any, what: str) -> dict[str, Any]:
    """A kubeconfig given as YAML/JSON text or a mapping (a stack output); a masked or broken one is refused."""
    from placement.errors import UsageError
    from placement.readers import parse_yaml

    if isinstance(value, str):
        if value == "[secret]":
            raise FleetError(f"{what} is masked: export the outputs with --show-secrets", EXIT_BAD_INPUT)
        try:
            value = parse_yaml(value, what)
        except UsageError:
            value = None
    if not isinstance(value, Mapping) or not value.get("clusters"):
        raise FleetError(f"{what} is not a kubeconfig (YAML/JSON with clusters, users, contexts)", EXIT_BAD_INPUT)
    return dict(value)


def api_client(kubeconfig: Any = None, path: str | None = None, what: str = "kubeconfig", *,
               in_cluster: bool = False, default: bool = False) -> Any:
    """A Kubernetes ``ApiClient`` for a kubeconfig (stack output or Secret), a kubeconfig file, the pod's
    service account (``in_cluster``) or the default kubeconfig (``default``: ``$KUBECONFIG``,
    ``~/.kube/config``), without touching the process-wide default configuration."""
    from kubernetes import client, config

    conf = client.Configuration()
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=conf)
        elif path or default:
            config.load_kube_config(config_file=path, client_configuration=conf)
        else:
            config.load_kube_config_from_dict(kubeconfig_doc(kubeconfig, what), client_configuration=conf)
    except FleetError:
        raise
    except Exception as exc:  # ConfigException, missing exec plugin, unreadable file: one line, not a traceback
        where = "in-cluster config" if in_cluster else path or what
        raise FleetError(f"{where}: cannot load the kubeconfig: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                         EXIT_BAD_INPUT) from None
    return client.ApiClient(conf)


def api_message(exc: Any) -> str:
    """The API server's one-line message of an ``ApiException`` (its Status ``message``), else the reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or "error").splitlines()[0]


def is_unreachable(exc: BaseException) -> bool:
    """A transport failure (refused, reset, timed out, TLS) rather than an answer from the API server."""
    from urllib3.exceptions import HTTPError

    return isinstance(exc, (HTTPError, OSError))


# ----------------------------------------------------------------------------- creating objects


def create(api: Any, doc: Mapping[str, Any]) -> dict[str, Any]:
    """Create one object rendered by :mod:`placement.fleet.manifests`; returns it as the server stored it.

    The API server's status code is what counts: a 2xx answer whose body is not a JSON object (a proxy's
    page, a cut connection) still means the object was created, so it is returned as the manifest's kind,
    namespace and name with ``"unreadable"`` saying why (its uid is unknown) - never an exception that would
    make the user retry and hit 409.
    """
    from kubernetes import client

    kind, ns = doc["kind"], doc["metadata"].get("namespace")
    body = dict(doc)

    def model(cls: Any) -> Any:
        # The typed client takes models; quantities are strings in manifests, so the round trip is exact.
        return cls.from_dict(body)

    # Raw answers (_preload_content=False): the client would otherwise try to build a model from any body.
    raw: dict[str, Any] = {"_request_timeout": API_TIMEOUT_S, "_preload_content": False}
    resp: Any
    if kind == "JobSet":
        resp = client.CustomObjectsApi(api).create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, body, **raw)
    elif kind == "Job":
        resp = client.BatchV1Api(api).create_namespaced_job(ns, model(client.V1Job), **raw)
    elif kind == "PersistentVolume":
        resp = client.CoreV1Api(api).create_persistent_volume(model(client.V1PersistentVolume), **raw)
    elif kind == "PersistentVolumeClaim":
        resp = client.CoreV1Api(api).create_namespaced_persistent_volume_claim(
            ns, model(client.V1PersistentVolumeClaim), **raw)
    elif kind == "ConfigMap":
        resp = client.CoreV1Api(api).create_namespaced_config_map(ns, model(client.V1ConfigMap), **raw)
    else:  # pragma: no cover - manifests render only the kinds above
        raise ValueError(kind)
    status = getattr(resp, "status", 201)
    try:
        stored = json.loads(resp.data or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):
        stored = None
    if isinstance(stored, dict) and isinstance(stored.get("metadata"), dict):
        return stored
    meta = {k: v for k, v in (("name", doc["metadata"]["name"]), ("namespace", ns)) if v}
    return {"kind": kind, "metadata": meta, "unreadable": f"HTTP {status} with a body that is not a JSON object"}


@dataclass(frozen=True)
class Created:
    kind: str
    namespace: str
    name: str
    uid: str
    reused: tuple[str, ...]  # storage objects that already existed


def _so_far(done: Sequence[str]) -> str:
    return f" (already created, kept and reused by a retry: {', '.join(done)})" if done else ""


def create_all(docs: Sequence[Mapping[str, Any]], api: Any, *, reuse: bool = True,
               done: list[str] | None = None) -> tuple[dict[str, Any], ...]:
    """Create ``docs`` in order on one cluster. With ``reuse``, an object that already exists (409) is kept
    and reported as ``{"reused": "<Kind> <name>"}`` (so a retry after a partial submit goes through);
    without it (the job itself) a 409 means a job of that name was already submitted: exit 2, naming it.
    API errors become one-line :class:`FleetError`\\ s - exit 2 for 400/409/422 (the request is wrong), 1
    otherwise - that name the objects created so far (``done``, shared across calls, is appended to)."""
    from kubernetes.client.exceptions import ApiException

    done = [] if done is None else done
    out: list[dict[str, Any]] = []
    for doc in docs:
        meta = doc["metadata"]
        what = f"{doc['kind']} {meta.get('namespace', '-')}/{meta['name']}" if meta.get("namespace") else \
            f"{doc['kind']} {meta['name']}"
        try:
            out.append(create(api, doc))
            done.append(what)
        except ApiException as exc:
            if exc.status == 409 and reuse:
                out.append({"reused": f"{doc['kind']} {meta['name']}"})
                continue
            code = EXIT_BAD_INPUT if exc.status in (400, 409, 422) else EXIT_FAILED
            hint = (f"; it exists already (submitted before?): `kubectl get {doc['kind'].lower()} -n "
                    f"{meta.get('namespace', '')} {meta['name']}`, or rename the job") if exc.status == 409 else ""
            raise FleetError(f"creating {what}: HTTP {exc.status}: {api_message(exc)}{hint}{_so_far(done)}",
                             code) from None
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            raise FleetError(f"creating {what}: cannot reach the API server ({exc.__class__.__name__})"
                             f"{_so_far(done)}") from None
    return tuple(out)


# ----------------------------------------------------------------------------- Kueue Workloads


def apply_workload_status(api: Any, namespace: str, name: str, body: Mapping[str, Any], *, field_manager: str,
                          force: bool = True) -> dict[str, Any]:
    """Server-side apply ``body`` to ``workloads/<name>/status`` as ``field_manager``.

    The client's default content type for this call is a JSON merge patch; ``_content_type`` selects
    ``application/apply-patch+yaml`` (the JSON body is valid YAML)."""
    from kubernetes import client

    resp: Any = client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name, dict(body), field_manager=field_manager,
        force=force, _content_type=APPLY_PATCH, _request_timeout=API_TIMEOUT_S)
    return dict(resp)


def create_event(api: Any, namespace: str, body: Mapping[str, Any]) -> None:
    """Create a core/v1 Event (``kubectl describe`` shows it on the involved object)."""
    from kubernetes import client

    event = client.CoreV1Event.from_dict(dict(body))
    assert event is not None
    client.CoreV1Api(api).create_namespaced_event(namespace, event, _request_timeout=API_TIMEOUT_S)


EVENT_PAGE = 500  # Events per LIST page (a busy cluster holds many; the API server pages them)


def list_events(api: Any, field_selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """core/v1 Events matching ``field_selector`` (e.g. ``source=<component>``, ``involvedObject.uid=<uid>``),
    in ``namespace`` or in all namespaces, page by page, as plain dicts (the raw JSON: no model round trip)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"field_selector": field_selector, "limit": EVENT_PAGE,
                                  "_preload_content": False, "_request_timeout": API_TIMEOUT_S}
        if token:
            kwargs["_continue"] = token
        resp: Any = (core.list_namespaced_event(namespace, **kwargs) if namespace
                     else core.list_event_for_all_namespaces(**kwargs))
        doc = json.loads(resp.data or b"{}")
        items += list(doc.get("items") or [])
        token = (doc.get("metadata") or {}).get("continue") or None
        if not token:
            return items


def read_secret_key(api: Any, namespace: str, name: str, key: str) -> str | None:
    """``data[key]`` of a Secret, decoded; None when the Secret or the key does not exist (404)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace, _request_timeout=API_TIMEOUT_S)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    data = secret.data or {}
    if key not in data:
        return None
    return base64.b64decode(data[key]).decode()


# ----------------------------------------------------------------------------- list + watch


@dataclass(frozen=True)
class Resource:
    """A listable collection: ``group``/``version``/``plural`` (``group`` may be ``batch``: the custom-objects
    paths ``/apis/<group>/<version>/<plural>`` serve built-in groups too), optional label selector."""

    group: str
    version: str
    plural: str
    label_selector: str | None = None

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}"


def list_objects(api: Any, res: Resource, timeout_s: float = API_TIMEOUT_S) -> tuple[list[dict[str, Any]], str]:
    """Every object of ``res`` in all namespaces and the list's resourceVersion."""
    from kubernetes import client

    kwargs: dict[str, Any] = {"_request_timeout": timeout_s}
    if res.label_selector:
        kwargs["label_selector"] = res.label_selector
    doc: Any = client.CustomObjectsApi(api).list_cluster_custom_object(res.group, res.version, res.plural, **kwargs)
    return list(doc.get("items") or []), str((doc.get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    """A cache of one resource kept current with list + watch.

    :meth:`relist` lists and replaces the cache; :meth:`run` (in a thread) watches from the last
    resourceVersion with server-side timeouts, applies ADDED/MODIFIED/DELETED events, re-lists after
    410 Gone, and after a dropped connection or an error answer waits (exponential backoff with jitter,
    at most ``max_backoff_s``) and resumes. ``on_change`` is called after every change."""

    def __init__(self, api: Any, res: Resource, *, on_change: Callable[[], None] | None = None,
                 watch_timeout_s: int = 60, max_backoff_s: float = 10.0, name: str = "") -> None:
        self.api = api
        self.res = res
        self.on_change = on_change
        self.watch_timeout_s = watch_timeout_s
        self.max_backoff_s = max_backoff_s
        self.name = name or str(res)
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], dict[str, Any]] = {}
        self._written: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        self._seen: dict[tuple[str, str], collections.deque[str]] = {}  # recent resourceVersions per object
        self._rv = ""
        self._watch: Any = None
        self.synced = False
        self.last_ok = 0.0  # time.monotonic() of the last answer from the API server
        self.last_error: str | None = None
        self.relists = 0

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            if not self._written:
                return list(self._items.values())
            out = dict(self._items)
            for key, (_, obj) in self._written.items():
                if key in out:
                    out[key] = obj
            return list(out.values())

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Show an object this process just wrote until the watch delivers that very version (resourceVersions
        are compared for equality only): events still in flight are older and must not hide the write."""
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        key = self._key(obj)
        with self._lock:
            if rv not in self._seen.get(key, ()):  # else the watch was quicker than the API's answer
                self._written[key] = (rv, dict(obj))

    def relist(self) -> None:
        items, rv = list_objects(self.api, self.res)
        with self._lock:
            self._items = {self._key(o): o for o in items}
            self._seen = {k: collections.deque([str((o.get("metadata") or {}).get("resourceVersion"))], maxlen=8)
                          for k, o in self._items.items()}
            self._written.clear()  # a fresh list already holds every write that preceded it
            self._rv = rv
        self.synced = True
        self.last_ok = time.monotonic()
        self.last_error = None
        self.relists += 1
        if self.on_change:
            self.on_change()

    def _apply(self, event: Mapping[str, Any]) -> None:
        obj = event.get("raw_object") or event.get("object")
        if not isinstance(obj, Mapping):
            return
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        key = self._key(obj)
        with self._lock:
            written = self._written.get(key)
            if written is not None and (written[0] == rv or event["type"] == "DELETED"):
                del self._written[key]
            if event["type"] != "BOOKMARK":
                self._seen.setdefault(key, collections.deque(maxlen=8)).append(rv)
            if event["type"] == "DELETED":
                self._items.pop(key, None)
            elif event["type"] in ("ADDED", "MODIFIED"):
                self._items[key] = dict(obj)
            if rv:
                self._rv = rv
        if event["type"] != "BOOKMARK" and self.on_change:
            self.on_change()

    def stop(self) -> None:
        w = self._watch
        if w is not None:
            w.stop()

    def run(self, stop: threading.Event) -> None:
        """Watch until ``stop`` is set; never raises."""
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        custom = client.CustomObjectsApi(self.api)
        backoff = 0.2
        while not stop.is_set():
            received = 0
            try:
                if not self.synced or not self._rv:
                    self.relist()
                kwargs: dict[str, Any] = {"resource_version": self._rv, "timeout_seconds": self.watch_timeout_s,
                                          "allow_watch_bookmarks": True,
                                          "_request_timeout": (API_TIMEOUT_S, self.watch_timeout_s + API_TIMEOUT_S)}
                if self.res.label_selector:
                    kwargs["label_selector"] = self.res.label_selector
                self._watch = w = watch.Watch()
                for event in w.stream(custom.list_cluster_custom_object, self.res.group, self.res.version,
                                      self.res.plural, **kwargs):
                    # An ERROR event (410 Gone above all) is raised by the client as ApiException.
                    self._apply(event)
                    self.last_ok = time.monotonic()
                    received += 1
                    if stop.is_set():
                        break
                self.last_ok = time.monotonic()
                backoff = 0.2
            except ApiException as exc:
                if exc.status == 410:  # our resourceVersion is too old: start over from a fresh list
                    log.info("watch expired, re-listing", extra={"resource": self.name})
                    self.synced = False
                    continue
                self.last_error = f"HTTP {exc.status}: {api_message(exc)}"
                log.warning("watch failed", extra={"resource": self.name, "error": self.last_error})
                stop.wait(backoff * (1 + random.random()))
                backoff = min(backoff * 2, self.max_backoff_s)
            except Exception as exc:  # dropped connection, timeout, refused: resume from the last resourceVersion
                if stop.is_set():
                    break
                self.last_error = f"{exc.__class__.__name__}: {str(exc)[:200]}"
                log.warning("watch interrupted", extra={"resource": self.name, "error": self.last_error})
                if received:  # the stream was delivering: resume at once, only failures in a row back off
                    backoff = 0.2
                    continue
                stop.wait(backoff * (1 + random.random()))
                backoff = min(backoff * 2, self.max_backoff_s)
            finally:
                self._watch = None
