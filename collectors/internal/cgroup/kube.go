package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Where the kubelet puts a pod's and a container's cgroup, by cgroup driver and QoS class
// (Guaranteed pods have no QoS level):
//
//	cgroupfs: kubepods[/burstable|/besteffort]/pod<UID>/<container>
//	systemd:  kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<UID with _>.slice/<container>
//
// and the container's directory by runtime and driver: containerd <id> /
// cri-containerd-<id>.scope, CRI-O crio-<id> / crio-<id>.scope, docker <id> /
// docker-<id>.scope. The same paths hold under each v1 hierarchy and under the v2 mount.
// Candidates list every layout (cgroupfs first); the first that exists (Mount.Resolve of
// the "|"-joined list) wins, so no driver setting is guessed.
//
// The collector passes the API's facts (kube-container:UID:QOS:ID, ExpandKube) and these
// rules are the only copy; they are tested against tests/data/cgroup/paths.json.

// QoSClasses are the values of a pod's status.qosClass.
var QoSClasses = []string{"Guaranteed", "Burstable", "BestEffort"}

var (
	// the API server's UUIDs, and a static pod's: the kubelet names it by the MD5 of its
	// manifest in hex (its mirror pod's kubernetes.io/config.mirror annotation)
	uidRe = regexp.MustCompile(`^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$`)
	cidRe = regexp.MustCompile(`^[0-9a-f]{12,128}$`)
)

// SplitContainerID splits status.containerStatuses[].containerID, e.g.
// "containerd://abc..." -> ("containerd", "abc..."), validated (it becomes a path).
func SplitContainerID(id string) (runtime, cid string, err error) {
	runtime, cid, ok := strings.Cut(id, "://")
	if !ok || (runtime != "containerd" && runtime != "cri-o" && runtime != "docker") || !cidRe.MatchString(cid) {
		return "", "", fmt.Errorf("container ID %q (the pod's status.containerStatuses[].containerID): expected "+
			"containerd://, cri-o:// or docker:// and a hex ID; other runtimes are not supported", id)
	}
	return runtime, cid, nil
}

// PodCandidates lists the paths the pod's cgroup may have: cgroupfs, then systemd.
func PodCandidates(podUID, qos string) ([]string, error) {
	if !uidRe.MatchString(podUID) {
		return nil, fmt.Errorf("pod UID %q is not a UID; pass the pod's metadata.uid (a static pod's: its "+
			"kubernetes.io/config.mirror annotation)", podUID)
	}
	us := strings.ReplaceAll(podUID, "-", "_")
	switch qos {
	case "Guaranteed":
		return []string{"kubepods/pod" + podUID, "kubepods.slice/kubepods-pod" + us + ".slice"}, nil
	case "Burstable", "BestEffort":
		q := strings.ToLower(qos)
		return []string{
			"kubepods/" + q + "/pod" + podUID,
			"kubepods.slice/kubepods-" + q + ".slice/kubepods-" + q + "-pod" + us + ".slice",
		}, nil
	}
	return nil, fmt.Errorf("QoS class %q (the pod's status.qosClass): expected one of %s", qos, strings.Join(QoSClasses, ", "))
}

// ContainerDirCandidates lists the names of the container's directory inside its pod's.
func ContainerDirCandidates(containerID string) ([]string, error) {
	runtime, cid, err := SplitContainerID(containerID)
	if err != nil {
		return nil, err
	}
	switch runtime {
	case "containerd":
		return []string{cid, "cri-containerd-" + cid + ".scope"}, nil
	case "cri-o":
		return []string{"crio-" + cid, "crio-" + cid + ".scope"}, nil
	}
	return []string{cid, "docker-" + cid + ".scope"}, nil
}

// ContainerCandidates lists the paths the container's cgroup may have.
func ContainerCandidates(podUID, qos, containerID string) ([]string, error) {
	pods, err := PodCandidates(podUID, qos)
	if err != nil {
		return nil, err
	}
	dirs, err := ContainerDirCandidates(containerID)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods {
		for _, d := range dirs {
			out = append(out, p+"/"+d)
		}
	}
	return out, nil
}

// UnderKubeletRoot is a kube alternative (rooted at kubepods, ExpandKube) under a kubelet
// --cgroup-root other than "/": a cgroupfs root ("kubelet": kubelet/kubepods/...), or a
// systemd one ("kubelet.slice", as kind runs it: the systemd driver names each slice after
// its whole path, so kubepods-burstable.slice becomes kubelet-kubepods-burstable.slice).
// "" where alt is not of that root's driver.
func UnderKubeletRoot(alt, root string) string {
	name, systemd := strings.CutSuffix(root, ".slice")
	if systemd != strings.HasPrefix(alt, "kubepods.slice/") {
		return ""
	}
	if !systemd {
		if !strings.HasPrefix(alt, "kubepods/") {
			return ""
		}
		return root + "/" + alt
	}
	parts := strings.Split(alt, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, "kubepods") {
			parts[i] = name + "-" + p
		}
	}
	return root + "/" + strings.Join(parts, "/")
}

// KubeletRoots are the kubelet --cgroup-root directories found at the top of a cgroup
// tree (dir: the mount's cpu hierarchy root), besides "/": a directory holding kubepods
// (cgroupfs) or NAME.slice holding NAME-kubepods.slice (systemd).
func KubeletRoots(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "kubepods") {
			continue
		}
		n := e.Name()
		inner := "kubepods"
		if name, ok := strings.CutSuffix(n, ".slice"); ok {
			inner = name + "-kubepods.slice"
		}
		if st, err := os.Stat(filepath.Join(dir, n, inner)); err == nil && st.IsDir() {
			out = append(out, n)
		}
	}
	return out
}

// KubePrefix starts a --cgroup argument that names a Kubernetes container or pod instead
// of a path: "kube-container:POD_UID:QOS:CONTAINER_ID" or "kube-pod:POD_UID:QOS". A
// collector that cannot see the node's tree passes what the API says, and the sampler,
// which can, finds the directory: the path rules live only here.
const KubePrefix = "kube-"

// ExpandKube turns a kube-container: or kube-pod: argument into its path alternatives.
func ExpandKube(arg string) ([]string, error) {
	if rest, ok := strings.CutPrefix(arg, "kube-container:"); ok {
		// the container ID comes last: it holds "://"
		f := strings.SplitN(rest, ":", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("%q: expected kube-container:POD_UID:QOS:CONTAINER_ID", arg)
		}
		return ContainerCandidates(f[0], f[1], f[2])
	}
	if rest, ok := strings.CutPrefix(arg, "kube-pod:"); ok {
		f := strings.Split(rest, ":")
		if len(f) != 2 {
			return nil, fmt.Errorf("%q: expected kube-pod:POD_UID:QOS", arg)
		}
		return PodCandidates(f[0], f[1])
	}
	return nil, fmt.Errorf("%q: expected kube-container:POD_UID:QOS:CONTAINER_ID or kube-pod:POD_UID:QOS", arg)
}
