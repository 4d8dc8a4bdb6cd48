"""What a bundle records about a target pod, from the pod object alone (no cluster)."""

from __future__ import annotations

import pytest

kubernetes = pytest.importorskip("kubernetes", reason="the [kube] extra is not installed")
from kubernetes.client import (  # noqa: E402
    V1ConfigMapKeySelector,
    V1Container,
    V1ContainerStatus,
    V1EnvVar,
    V1EnvVarSource,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceFieldSelector,
    V1ResourceRequirements,
)

from gmpanalysis.kube.collect import CollectConfig, CollectError, describe, validate  # noqa: E402

UID = "0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b"


def pod(limit="500m", env=None, qos="Burstable", cid="containerd://" + "ab" * 32):
    c = V1Container(name="app", env=env, resources=V1ResourceRequirements(limits={"cpu": limit} if limit else None))
    st = V1ContainerStatus(name="app", container_id=cid, image="i", image_id="i", ready=True, restart_count=0)
    return V1Pod(
        metadata=V1ObjectMeta(name="p", namespace="ns", uid=UID),
        spec=V1PodSpec(containers=[c], node_name="n1"),
        status=V1PodStatus(qos_class=qos, container_statuses=[st]),
    )


def downward(divisor=None):
    return [
        V1EnvVar(
            name="GOMAXPROCS",
            value_from=V1EnvVarSource(
                resource_field_ref=V1ResourceFieldSelector(resource="limits.cpu", divisor=divisor)
            ),
        )
    ]


@pytest.mark.parametrize("limit,quota", [("500m", 50_000), ("2", 200_000), ("1500m", 150_000), ("1m", 1_000)])
def test_quota_from_the_limit(limit, quota):
    assert describe(pod(limit), None)["quota_us"] == quota


def test_no_limit_no_quota():
    d = describe(pod(None, qos="BestEffort"), None)
    assert d["quota_us"] is None and d["qos"] == "BestEffort"


@pytest.mark.parametrize("limit,want", [("250m", "1"), ("1500m", "2"), ("2", "2")])
def test_downward_api_gomaxprocs_is_the_limit_rounded_up(limit, want):
    assert describe(pod(limit, env=downward()), None)["gomaxprocs_env"] == want
    # as the API server returns an unset divisor
    assert describe(pod(limit, env=downward("0")), None)["gomaxprocs_env"] == want


def test_gomaxprocs_from_elsewhere_is_set_not_unset():
    # another divisor gives millicores, not CPUs: named, not rounded
    assert describe(pod("1500m", env=downward("1m")), None)["gomaxprocs_env"] == "resourceFieldRef:limits.cpu"
    cm = V1EnvVar(
        name="GOMAXPROCS",
        value_from=V1EnvVarSource(config_map_key_ref=V1ConfigMapKeySelector(name="tuning", key="gomaxprocs")),
    )
    assert describe(pod(env=[cm]), None)["gomaxprocs_env"] == "valueFrom"


def test_literal_gomaxprocs():
    assert describe(pod(env=[V1EnvVar(name="GOMAXPROCS", value="8")]), None)["gomaxprocs_env"] == "8"


def test_unset_gomaxprocs():
    assert describe(pod(), None)["gomaxprocs_env"] is None


def test_missing_container_and_not_started():
    with pytest.raises(CollectError, match="no container 'nope'"):
        describe(pod(), "nope")
    with pytest.raises(CollectError, match="not running yet"):
        describe(pod(cid=None), None)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"namespace": "Bad_NS", "pod": "p"}, "not a valid Kubernetes name"),
        ({"namespace": "ns"}, "exactly one of --pod"),
        ({"namespace": "ns", "pod": "p", "selector": "a=b"}, "exactly one of --pod"),
        ({"namespace": "ns", "selector": "a=b; rm -rf /"}, "characters a selector cannot have"),
        ({"namespace": "ns", "pod": "p", "duration_s": 0}, "--duration"),
        ({"namespace": "ns", "pod": "p", "pprof_port": 70000}, "not a port"),
    ],
)
def test_inputs_are_validated(kw, match):
    with pytest.raises(CollectError, match=match):
        validate(CollectConfig(**kw))


def test_a_static_pod_is_named_by_the_kubelet_s_uid():
    """A static pod's cgroups carry the UID the kubelet derived from its manifest, which the
    API shows only in the mirror pod's kubernetes.io/config.mirror annotation: that is the
    UID the collector resolves, and the same pod read again is not taken for a new one."""
    from gmpanalysis.kube.target import gone_reason

    static = pod()
    static.metadata.annotations = {"kubernetes.io/config.mirror": "6576683a93d91d8e2119df2c2755f2f1"}
    info = describe(static, None)
    assert info["pod_uid"] == "6576683a93d91d8e2119df2c2755f2f1"
    assert gone_reason(static, info) is None
    assert describe(pod(), None)["pod_uid"] == UID
    replaced = pod()
    replaced.metadata.annotations = {"kubernetes.io/config.mirror": "0" * 32}
    assert "disappeared" in gone_reason(replaced, info)
