"""Kubernetes collection (needs the [kube] extra: pip install 'gmpanalysis[kube]')."""

from .collect import CollectConfig, CollectError, collect, collect_pod, describe

__all__ = ["CollectConfig", "CollectError", "collect", "collect_pod", "describe"]
