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


def _client(cfg: CollectConfig) -> Any:
    try:
        from kubernetes import client, config
    except ImportError:
        raise CollectError(
            "the Kubernetes collector needs the kubernetes client: pip install 'gmpanalysis[kube]'"
        ) from None
    try:
        if cfg.kubeconfig:
            if not Path(cfg.kubeconfig).is_file():
                raise CollectError(f"{cfg.kubeconfig}: kubeconfig not found")
            config.load_kube_config(config_file=cfg.kubeconfig, context=cfg.context)
        elif os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
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


def _call(fn: Callable[..., Any], verb: str, resource: str, namespace: str, *a: Any, **kw: Any) -> Any:
    from kubernetes.client.rest import ApiException

    try:
        return fn(*a, **kw)
    except ApiException as e:
        raise _api_error(e, verb, resource, namespace) from None


def _api_error(e: Any, verb: str, resource: str, namespace: str) -> CollectError:
    """The CollectError for an ApiException of ``verb`` on ``resource``."""
    # a refused websocket upgrade (exec, port-forward) comes back as status 0 with the
    # apiserver's 403 answer in the text
    if e.status == 403 or ('"code":403' in str(e) and "Forbidden" in str(e)):
        return _forbidden(e, verb, resource, namespace)
    if e.status == 404:
        return CollectError(f"{resource} not found in namespace {namespace!r}: {e.reason}")
    return CollectError(f"{verb} {resource} in {namespace!r} failed: {e.status} {e.reason}")
