"""Which service a bundle is of: the workload it belongs to (a Kubernetes controller, as the
fleet's store partitions by it) and, for the lab's demo app, what it ran. Runs compared or
advised together are meant to be of one service; the report compares runs of one service
under one load and limit, and the advice says where the runs it averages are not.
"""

from __future__ import annotations

import re
from typing import Any

# a pod of a Deployment is named <deployment>-<replicaset hash>-<5 characters>, of a
# ReplicaSet or DaemonSet <name>-<5 characters>, of a StatefulSet <name>-<ordinal>
_DEPLOYMENT_POD = re.compile(r"^(?P<w>.+)-[a-z0-9]{6,10}-[a-z0-9]{5}$")
_SET_POD = re.compile(r"^(?P<w>.+)-(?:[a-z0-9]{5}|\d+)$")


def workload_of(meta: dict[str, Any]) -> str:
    """The workload a bundle belongs to: as the node agent named it (meta.json
    ``agent.workload``, namespace/controller/container: its controller part), else meta.json
    ``workload`` where a collector named it, else the pod's controller (``owner``: a
    ReplicaSet's Deployment), else the owner's name as Kubernetes builds pod names from it,
    else the run's name (lab runs)."""
    agent = meta.get("agent")
    named = agent.get("workload") if isinstance(agent, dict) else None
    if isinstance(named, str) and named.count("/") == 2 and named.split("/")[1]:
        return named.split("/")[1]
    w = meta.get("workload")
    if isinstance(w, str) and w:
        return w
    owner = meta.get("owner")  # the pod's controller, as gmp-agent read it from the API
    if isinstance(owner, dict) and isinstance(owner.get("name"), str) and owner["name"]:
        name, h = owner["name"], owner.get("pod_template_hash")
        # a Deployment names its ReplicaSet <deployment>-<pod-template-hash>
        if owner.get("kind") == "ReplicaSet" and isinstance(h, str) and h and name.endswith(f"-{h}"):
            return name[: -len(h) - 1]
        return name
    pod = meta.get("pod")
    if isinstance(pod, str) and pod:
        for rx in (_DEPLOYMENT_POD, _SET_POD):
            m = rx.match(pod)
            if m:
                return m["w"]
        return pod
    return str(meta.get("name") or "run")


def service_of(meta: dict[str, Any]) -> str:
    """The service a bundle is of, in words: the lab's demo app by what each request does
    (meta.json ``workload``: its kind, CPU per request, garbage and live heap), else
    :func:`workload_of` (a Kubernetes workload; a run's own name where nothing says more)."""
    w = meta.get("workload")
    if isinstance(w, dict) and w.get("kind"):
        said = [str(w["kind"])]
        if isinstance(w.get("work_ms"), (int, float)):
            said.append(f"{w['work_ms']:g} ms")
        if isinstance(w.get("alloc_kb"), (int, float)) and w["alloc_kb"]:
            said.append(f"{w['alloc_kb']:g} KiB garbage")
        if isinstance(w.get("live_mb"), (int, float)) and w["live_mb"]:
            said.append(f"{w['live_mb']:g} MiB live")
        return " ".join(said[:2]) + (", " + ", ".join(said[2:]) if len(said) > 2 else "")
    return workload_of(meta)
