"""The manifests' security settings, read from the files the local cluster applies (the
end-to-end tests run them on a real cluster; this checks them without one)."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "collectors" / "deploy"


def _docs(name: str) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d}


def test_sampler_runs_under_runtime_default_seccomp_with_only_sys_nice():
    pod = _docs("sampler.yaml")[("DaemonSet", "gmp-sampler")]["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_NICE"]}
    assert sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
    # stays UID 0 on purpose: a non-root container gets no ambient capabilities, so it
    # would lose SCHED_FIFO (collectors/deploy/README.md)
    assert "runAsNonRoot" not in sc and "runAsNonRoot" not in pod["securityContext"]
    assert all(m.get("readOnly") for m in c["volumeMounts"])


def test_rbac_lets_pod_reads_be_bound_per_namespace():
    docs = _docs("rbac.yaml")
    # no binding ships: nothing is granted cluster-wide by applying the file
    assert not [k for k in docs if k[0].endswith("Binding")]
    exec_role = docs[("Role", "gmp-collector-exec")]
    assert exec_role["metadata"]["namespace"] == "gmp-system"
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in exec_role["rules"]}
    # the sampler lookup needs no cluster-wide pod read
    assert rules == {("pods",): {"get", "list"}, ("pods/exec",): {"create", "get"}}
    for name in ("gmp-collector", "gmp-collector-target"):
        for r in docs[("ClusterRole", name)]["rules"]:
            assert set(r["verbs"]) <= {"get", "list", "create"} and "*" not in r["resources"]
    text = (DEPLOY / "README.md").read_text()
    assert "RoleBinding in each namespace" in text and "env values" in text and "ambient" in text


def test_agent_reads_pods_and_its_node_only():
    docs = _docs("agent.yaml")
    (rule,) = docs[("ClusterRole", "gmp-agent")]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    binding = docs[("ClusterRoleBinding", "gmp-agent")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gmp-agent", "namespace": "gmp-system"}]
    pod = docs[("DaemonSet", "gmp-agent")]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert "cpu" not in c["resources"].get("limits", {})  # a throttled sampler misses the boundaries
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_NICE"]}
    assert c["securityContext"]["readOnlyRootFilesystem"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["cgroup"]["readOnly"] and not mounts["bundles"].get("readOnly")
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # the image holds both binaries: the agent runs the sampler for its captures
    assert c["command"][0] == "/gmp-agent" and "/gmp-sampler" in c["command"]
    assert "gmp-agent" in (DEPLOY / "Dockerfile.sampler").read_text()
