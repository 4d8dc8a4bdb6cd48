"""Kubernetes collection (needs the [kube] extra: pip install 'gmpanalysis[kube]')."""

from .collect import CollectConfig, CollectError, collect, collect_pod, describe
from .paths import container_cgroup_candidates, pod_cgroup_candidates, resolve

__all__ = [
    "CollectConfig",
    "CollectError",
    "collect",
    "collect_pod",
    "container_cgroup_candidates",
    "describe",
    "pod_cgroup_candidates",
    "resolve",
]
