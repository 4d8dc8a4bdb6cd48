"""The target pod: its node, cgroup identity, limits and GOMAXPROCS; the sampler pod on its
node; following a restarted container."""

from __future__ import annotations

import math
import time
from typing import Any

from ..errors import CollectError
from .api import api_call
from .config import DNS_SUBDOMAIN, CollectConfig


def _cpu_milli(q: str | None) -> int | None:
    if not q:
        return None
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(round(float(q) * 1000))


# A static pod (a manifest file the kubelet reads, e.g. kube-apiserver or etcd) runs under a
# UID the kubelet derives from the file's content; the API shows a mirror pod with a UID of
# its own and the kubelet's in this annotation. Its cgroups are named after the kubelet's.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def kubelet_uid(pod: Any) -> str | None:
    """The UID the kubelet runs the pod under and names its cgroups after: the API's, or for
    a static pod's mirror, the one its mirror annotation gives."""
    mirror = (pod.metadata.annotations or {}).get(MIRROR_ANNOTATION)
    return mirror or pod.metadata.uid


def describe(pod: Any, container: str | None) -> dict[str, Any]:
    """The facts a bundle records about a target pod and container."""
    spec_c = next((c for c in pod.spec.containers if container in (None, c.name)), None)
    if spec_c is None:
        raise CollectError(f"pod {pod.metadata.name} has no container {container!r}")
    st = next((s for s in (pod.status.container_statuses or []) if s.name == spec_c.name), None)
    if st is None or not st.container_id:
        raise CollectError(f"container {spec_c.name} of pod {pod.metadata.name} is not running yet")
    limits = (spec_c.resources.limits or {}) if spec_c.resources else {}
    milli = _cpu_milli(limits.get("cpu"))
    gmp_env: str | None = None
    for e in spec_c.env or []:
        if e.name != "GOMAXPROCS":
            continue
        if e.value is not None:
            gmp_env = e.value
        elif e.value_from is not None and e.value_from.resource_field_ref is not None:
            # the downward API rounds limits.cpu up to whole CPUs (divisor 1; the API server
            # returns an unset divisor as "0", meaning 1), frozen at container start; another
            # divisor or resource is named, not guessed
            ref = e.value_from.resource_field_ref
            if ref.resource == "limits.cpu" and milli is not None and str(ref.divisor or "1") in ("0", "1"):
                gmp_env = str(max(1, math.ceil(milli / 1000)))
            else:
                gmp_env = f"resourceFieldRef:{ref.resource}"
        elif e.value_from is not None:
            # a ConfigMap's, Secret's or field's value: set, but not shown in the pod (null
            # would say "unset", and the analysis would apply the runtime's own rule)
            gmp_env = "valueFrom"
    return {
        "namespace": pod.metadata.namespace,
        "pod": pod.metadata.name,
        "container": spec_c.name,
        "node": pod.spec.node_name,
        "pod_uid": kubelet_uid(pod),
        "container_id": st.container_id,
        "restart_count": st.restart_count,
        "qos": pod.status.qos_class,
        "cpu_limit": limits.get("cpu"),
        "quota_us": None if milli is None else max(1000, milli * 100),
        "gomaxprocs_env": gmp_env,
    }


def sampler_pod(core: Any, cfg: CollectConfig, node: str) -> str:
    # the node name comes from the API server and goes into a field selector: a name with
    # ',' or '=' (which no real node has) could add terms to it
    if not isinstance(node, str) or not DNS_SUBDOMAIN.match(node):
        raise CollectError(f"node name {node!r} (the target's spec.nodeName) is not a valid Kubernetes name")
    pods = api_call(
        core.list_namespaced_pod,
        "list",
        "pods",
        cfg.sampler_namespace,
        cfg.sampler_namespace,
        label_selector=cfg.sampler_selector,
        field_selector=f"spec.nodeName={node}",
    )
    running = [p.metadata.name for p in pods.items if p.status.phase == "Running"]
    if not running:
        raise CollectError(
            f"no running sampler pod on node {node} (namespace {cfg.sampler_namespace}, selector "
            f"{cfg.sampler_selector}): apply collectors/deploy/sampler.yaml"
        )
    return running[0]


def gone_reason(pod: Any, info: dict[str, Any]) -> str | None:
    """Why the pod object ``pod`` (as read now) means the target of ``info`` is going away,
    or None. Deleting a pod sets ``deletion_timestamp`` at once; the kubelet then stops its
    containers (SIGTERM, SIGKILL after the grace period), removes their cgroups, and the API
    object goes last. A pod of the same name with another UID (a StatefulSet's) is a new pod:
    the one being collected is gone."""
    name = info["pod"]
    if pod.metadata.deletion_timestamp is not None:
        return f"target pod {name} is being deleted (since {pod.metadata.deletion_timestamp})"
    uid, now = info.get("pod_uid"), kubelet_uid(pod)
    if uid and now and now != uid:
        return f"target pod {name} disappeared mid-collection (a new pod of that name has UID {now})"
    return None


def pod_gone(core: Any, cfg: CollectConfig, info: dict[str, Any]) -> tuple[str | None, Any]:
    """Read the target pod again: (why it is going away, None), or (None, the pod object)
    while it stands. Every way a collection can end early (the sampler's cgroup vanished,
    the sampler could not find it at the start of an exec, the exec or the port-forward
    broke) asks this before blaming the sampler: a deleted pod's cgroups disappear, so its
    deletion surfaces as one of those, depending on when it happened."""
    from kubernetes.client.rest import ApiException

    try:
        pod = core.read_namespaced_pod(info["pod"], cfg.namespace)
    except ApiException as e:
        if e.status == 404:
            return f"target pod {info['pod']} disappeared mid-collection ({e.status} {e.reason})", None
        return f"target pod {info['pod']} could not be read mid-collection ({e.status} {e.reason})", None
    return gone_reason(pod, info), pod


def wait_for_container(
    core: Any, cfg: CollectConfig, info: dict[str, Any], deadline: float
) -> tuple[str | None, str | None]:
    """After the container's cgroup vanished: (reason the pod is gone, None), or (None, the
    new container ID), or (None, None) when the window ended first."""
    while time.monotonic() < deadline:
        gone, pod = pod_gone(core, cfg, info)
        if gone:
            return gone, None
        try:
            new = describe(pod, info["container"])
        except CollectError:
            new = None
        if new is not None and new["container_id"] != info["container_id"]:
            return None, new["container_id"]
        time.sleep(0.5)
    return None, None
