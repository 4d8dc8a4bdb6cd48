"""The Kubernetes API client, and API errors turned into messages that say what to grant."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CollectError
from .config import CollectConfig


def _kubeconfig_files(cfg: CollectConfig) -> list[str]:
    """The kubeconfig files the client would read: --kubeconfig, else $KUBECONFIG (a
    list, as kubectl reads it), else ~/.kube/config."""
    if cfg.kubeconfig:
        return [cfg.kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [f for f in env.split(os.pathsep) if f]
    return [str(Path("~/.kube/config").expanduser())]


def _check_kubeconfig(path: str, given: bool) -> None:
    """A kubeconfig is a YAML mapping: say so, naming the file, before the client reads it
    (its parser raises YAML, decoding or type errors of its own on anything else)."""
    import yaml

    p = Path(path)
    if not p.exists():
        if given:
            raise CollectError(f"{path}: kubeconfig not found; pass --kubeconfig FILE")
        return  # the client says there is no configuration
    if not p.is_file():
        raise CollectError(f"{path}: not a kubeconfig file (a directory or a device); pass --kubeconfig FILE")
    if p.stat().st_size > 16 << 20:
        raise CollectError(f"{path}: {p.stat().st_size} bytes is not a kubeconfig; pass --kubeconfig FILE")
    try:
        doc = yaml.safe_load(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CollectError(f"{path}: not a kubeconfig (not UTF-8 text at byte {e.start})") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise CollectError(f"{path}: not a kubeconfig (YAML error{at}: {getattr(e, 'problem', e)})") from None
    if doc is None:
        raise CollectError(f"{path}: the kubeconfig is empty; pass --kubeconfig FILE")
    if not isinstance(doc, dict):
        raise CollectError(f"{path}: not a kubeconfig (expected a YAML mapping with clusters, users and contexts)")
    for k in ("clusters", "users", "contexts"):
        if not isinstance(doc.get(k) or [], list) or not all(isinstance(x, dict) for x in doc.get(k) or []):
            raise CollectError(f"{path}: not a kubeconfig ({k} must be a list of mappings)")


def kube_client(cfg: CollectConfig) -> Any:
    try:
        from kubernetes import client, config
    except ImportError:
        raise CollectError(
            "the Kubernetes collector needs the kubernetes client: pip install 'gmpanalysis[kube]'"
        ) from None
    in_cluster = not cfg.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG")
    if not in_cluster:
        for f in _kubeconfig_files(cfg):
            _check_kubeconfig(f, given=bool(cfg.kubeconfig))
    try:
        if cfg.kubeconfig:
            config.load_kube_config(config_file=cfg.kubeconfig, context=cfg.context)
        elif in_cluster:
            config.load_incluster_config()  # running in a pod: its ServiceAccount
        else:
            config.load_kube_config(context=cfg.context)
    except config.ConfigException as e:
        where = cfg.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise CollectError(
            f"{where}: cannot load a Kubernetes configuration ({e}); pass --kubeconfig FILE (and --context)"
        ) from None
    return client.CoreV1Api()


def private(core: Any) -> Any:
    """A CoreV1Api on its own ApiClient, same configuration. The client's exec and
    port-forward helpers swap the shared ApiClient's ``call_api`` for a websocket one
    while they run: two threads streaming on one ApiClient (the sampler's exec and the trace's
    port-forward, or two pods) can get each other's, e.g. a WSClient where a port-forward was
    asked for."""
    from kubernetes import client

    return client.CoreV1Api(client.ApiClient(core.api_client.configuration))


def _forbidden(e: Any, verb: str, resource: str, namespace: str) -> CollectError:
    reason = ""
    text = str(e.body or e)
    m = re.search(r'"message":"((?:[^"\\]|\\.)*)"', text)
    if m:
        reason = m.group(1).replace('\\"', '"')
    else:
        try:
            reason = json.loads(e.body).get("message", "")
        except (ValueError, TypeError, AttributeError):
            reason = text[:200]
    return CollectError(
        f"forbidden: cannot {verb} {resource} in namespace {namespace!r} ({reason}); "
        "grant it with collectors/deploy/rbac.yaml"
    )


def api_call(fn: Callable[..., Any], verb: str, resource: str, namespace: str, *a: Any, **kw: Any) -> Any:
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError

    try:
        return fn(*a, **kw)
    except ApiException as e:
        raise api_error(e, verb, resource, namespace) from None
    except HTTPError as e:
        raise unreachable(e, verb, resource, namespace) from None


def unreachable(e: Exception, verb: str, resource: str, namespace: str) -> CollectError:
    """The CollectError for a request that got no answer at all (a urllib3 error): the
    server in the kubeconfig is not there, or not reachable from here."""
    why = getattr(e, "reason", None) or e
    pool = getattr(e, "pool", None)
    server = f" {pool.scheme}://{pool.host}:{pool.port}" if pool is not None else ""
    return CollectError(
        f"{verb} {resource} in {namespace!r}: cannot reach the Kubernetes API server{server} ({why}); "
        "check the kubeconfig's server address and that the cluster is running"
    )


def api_error(e: Any, verb: str, resource: str, namespace: str) -> CollectError:
    """The CollectError for an ApiException of ``verb`` on ``resource``."""
    # a refused websocket upgrade (exec, port-forward) comes back as status 0 with the
    # apiserver's 403 answer in the text
    if e.status == 403 or ('"code":403' in str(e) and "Forbidden" in str(e)):
        return _forbidden(e, verb, resource, namespace)
    if e.status == 404:
        return CollectError(f"{resource} not found in namespace {namespace!r}: {e.reason}")
    return CollectError(f"{verb} {resource} in {namespace!r} failed: {e.status} {e.reason}")
