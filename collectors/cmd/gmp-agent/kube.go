package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// PprofAnnotation is the pod annotation naming the port net/http/pprof listens on: a pod
// that carries it gets a Go execution trace with its captures.
const PprofAnnotation = "gmpanalysis/pprof-port"

// spec is one container to watch, as the API server describes it. Only the facts the
// agent writes into meta.json or needs to find the cgroups are kept.
type spec struct {
	Namespace   string
	Pod         string
	UID         string
	Node        string
	QoS         string
	Container   string
	ContainerID string // runtime://hex
	CPULimit    string
	Restarts    int
	GomaxEnv    *string // GOMAXPROCS as the container sees it (gomaxprocsEnv)
	PprofPort   int     // 0: none declared, or declared for another container of the pod
	// Primary: the container whose trace the pod's annotation names (the one declaring the
	// port, or a pod's only limited container): the one the pod level's throttling fires
	Primary     bool
	PodIP       string
	HostNetwork bool
	Owner       *owner
	Deleting    bool
}

type owner struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// pod-template-hash: a Deployment names its ReplicaSet <deployment>-<hash>
	TemplateHash string `json:"pod_template_hash,omitempty"`
}

// key identifies a container instance: a restart changes the ID and so the cgroup.
func (s *spec) key() string { return s.UID + "/" + s.Container + "/" + s.ContainerID }

// MirrorAnnotation: a static pod (a manifest file the kubelet reads, such as etcd's) runs
// under a UID the kubelet derives from the file; the API shows a mirror pod with a UID of
// its own and the kubelet's in this annotation. The pod's cgroups carry the kubelet's.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// kubeletUID is the UID the kubelet names a pod's cgroups after.
func kubeletUID(uid string, annotations map[string]string) string {
	if m := annotations[MirrorAnnotation]; m != "" {
		return m
	}
	return uid
}

// envSource is an env var's valueFrom, as far as the agent reads it.
type envSource struct {
	ResourceFieldRef *struct {
		Resource string `json:"resource"`
		Divisor  string `json:"divisor"`
	} `json:"resourceFieldRef"`
}

// podList is the part of a PodList the agent reads.
type podList struct {
	Items []struct {
		Metadata struct {
			Name              string            `json:"name"`
			Namespace         string            `json:"namespace"`
			UID               string            `json:"uid"`
			Annotations       map[string]string `json:"annotations"`
			Labels            map[string]string `json:"labels"`
			DeletionTimestamp *string           `json:"deletionTimestamp"`
			OwnerReferences   []struct {
				Kind       string `json:"kind"`
				Name       string `json:"name"`
				Controller *bool  `json:"controller"`
			} `json:"ownerReferences"`
		} `json:"metadata"`
		Spec struct {
			NodeName    string `json:"nodeName"`
			HostNetwork bool   `json:"hostNetwork"`
			// pod-level resources (KEP-2837): the pod's cgroup carries this quota
			Resources struct {
				Limits map[string]string `json:"limits"`
			} `json:"resources"`
			Containers     []containerSpec `json:"containers"`
			InitContainers []containerSpec `json:"initContainers"`
		} `json:"spec"`
		Status struct {
			Phase                 string            `json:"phase"`
			QOSClass              string            `json:"qosClass"`
			PodIP                 string            `json:"podIP"`
			ContainerStatuses     []containerStatus `json:"containerStatuses"`
			InitContainerStatuses []containerStatus `json:"initContainerStatuses"`
		} `json:"status"`
	} `json:"items"`
}

type containerSpec struct {
	Name          string `json:"name"`
	RestartPolicy string `json:"restartPolicy"` // "Always" on an init container: a native sidecar
	Resources     struct {
		Limits map[string]string `json:"limits"`
	} `json:"resources"`
	Env []struct {
		Name      string     `json:"name"`
		Value     *string    `json:"value"`
		ValueFrom *envSource `json:"valueFrom"`
	} `json:"env"`
	Ports []struct {
		ContainerPort int `json:"containerPort"`
	} `json:"ports"`
}

type containerStatus struct {
	Name         string `json:"name"`
	ContainerID  string `json:"containerID"`
	RestartCount int    `json:"restartCount"`
	State        struct {
		Running *struct{} `json:"running"`
	} `json:"state"`
}

// specsFrom turns a PodList into the containers worth watching: running, in a running
// pod, with a CPU limit of their own or their pod's (no limit, no quota, nothing to
// throttle).
func specsFrom(body []byte) ([]spec, error) {
	var pl podList
	if err := json.Unmarshal(body, &pl); err != nil {
		return nil, fmt.Errorf("pod list: %w", err)
	}
	var out []spec
	for _, p := range pl.Items {
		if p.Status.Phase != "Running" {
			continue
		}
		var own *owner
		for _, o := range p.Metadata.OwnerReferences {
			if o.Controller != nil && *o.Controller {
				own = &owner{Kind: o.Kind, Name: o.Name, TemplateHash: p.Metadata.Labels["pod-template-hash"]}
			}
		}
		port := 0
		if v, ok := p.Metadata.Annotations[PprofAnnotation]; ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 && n < 65536 {
				port = n
			}
		}
		// the annotated port belongs to the container that declares it (limited or not:
		// an unlimited app's trace is no one else's); only where no container of the pod
		// declares any port does a pod's one limited container get it
		// native sidecars (init containers with restartPolicy Always, Kubernetes 1.29+) run
		// beside the app for the pod's life, with limits of their own: watched as the
		// containers are
		containers, statuses := p.Spec.Containers, p.Status.ContainerStatuses
		for _, c := range p.Spec.InitContainers {
			if c.RestartPolicy == "Always" {
				containers = append(containers[:len(containers):len(containers)], c)
			}
		}
		if len(containers) > len(p.Spec.Containers) {
			statuses = append(statuses[:len(statuses):len(statuses)], p.Status.InitContainerStatuses...)
		}
		// a pod-level CPU limit (pod-level resources) quotas the pod's cgroup: each of its
		// containers is frozen by it, limited itself or not; the limit that binds it
		podLimit := p.Spec.Resources.Limits["cpu"]
		limitOf := func(c containerSpec) string {
			if l := c.Resources.Limits["cpu"]; l != "" {
				return l
			}
			return podLimit
		}
		traced, limited, declares := -1, []int{}, false
		for i, c := range containers {
			if limitOf(c) != "" {
				limited = append(limited, i)
			}
			for _, cp := range c.Ports {
				declares = true
				if port > 0 && cp.ContainerPort == port && traced < 0 {
					traced = i
				}
			}
		}
		if traced < 0 && port > 0 && !declares && len(limited) == 1 {
			traced = limited[0]
		}
		primary := traced
		if (primary < 0 || limitOf(containers[primary]) == "") && len(limited) > 0 {
			primary = limited[0]
		}
		for i, c := range containers {
			lim := limitOf(c)
			if lim == "" {
				continue
			}
			for _, st := range statuses {
				if st.Name != c.Name || st.State.Running == nil || st.ContainerID == "" {
					continue
				}
				s := spec{Namespace: p.Metadata.Namespace, Pod: p.Metadata.Name, UID: kubeletUID(p.Metadata.UID, p.Metadata.Annotations),
					Node: p.Spec.NodeName, QoS: p.Status.QOSClass, Container: c.Name, ContainerID: st.ContainerID,
					CPULimit: lim, Restarts: st.RestartCount, PodIP: p.Status.PodIP, Primary: i == primary,
					HostNetwork: p.Spec.HostNetwork, Owner: own, Deleting: p.Metadata.DeletionTimestamp != nil}
				if i == traced {
					s.PprofPort = port
				}
				for _, e := range c.Env {
					if e.Name != "GOMAXPROCS" {
						continue
					}
					if v, ok := gomaxprocsEnv(e.Value, e.ValueFrom, lim); ok {
						s.GomaxEnv = &v
					}
				}
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// apiClient lists the pods of one node: GET /api/v1/pods?fieldSelector=spec.nodeName=NODE,
// the one request the agent makes (RBAC: list pods, cluster-wide, read-only).
type apiClient struct {
	base      string
	node      string
	tokenFile string
	http      *http.Client
}

func newAPIClient(base, node, tokenFile, caFile string) (*apiClient, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
		}
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return &apiClient{base: strings.TrimRight(base, "/"), node: node, tokenFile: tokenFile,
		http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}, nil
}

func (c *apiClient) list(ctx context.Context) ([]spec, error) {
	// resourceVersion=0: served from the API server's watch cache, not a quorum read of
	// every pod in etcd (every node lists every --list-every)
	q := url.Values{"fieldSelector": {"spec.nodeName=" + c.node}, "resourceVersion": {"0"}}
	u := c.base + "/api/v1/pods?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if c.tokenFile != "" {
		tok, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", c.node, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", c.node, err)
	}
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
			hint = " (the agent's ServiceAccount needs list on pods: collectors/deploy/agent.yaml's ClusterRole gmp-agent)"
		}
		return nil, fmt.Errorf("list pods on node %s: %s%s: %.300s", c.node, resp.Status, hint, body)
	}
	return specsFrom(body)
}

// gomaxprocsEnv is the GOMAXPROCS value the container's environment holds: a literal value,
// or for the downward API's limits.cpu (divisor 1) the limit rounded up to whole CPUs (the
// kubelet resolves it once, at the container's start); another reference is named as such,
// since "unset" would mean the runtime's own rule applies; a ConfigMap's, Secret's or
// field's value is "valueFrom" (set, value unknown).
func gomaxprocsEnv(value *string, from *envSource, limit string) (string, bool) {
	if value != nil {
		return *value, true
	}
	if from == nil {
		return "", false
	}
	if from.ResourceFieldRef == nil {
		// a ConfigMap, a Secret, a field: set, to a value the API does not show here
		return "valueFrom", true
	}
	ref := from.ResourceFieldRef
	// an unset divisor comes back from the API server as "0", meaning 1
	if ref.Resource == "limits.cpu" && (ref.Divisor == "" || ref.Divisor == "0" || ref.Divisor == "1") {
		if milli, ok := cpuMilli(limit); ok {
			n := (milli + 999) / 1000
			if n < 1 {
				n = 1
			}
			return strconv.FormatInt(n, 10), true
		}
	}
	return "resourceFieldRef:" + ref.Resource, true
}

// cpuMilli parses a CPU quantity as the API writes limits: "500m", "2", "1.5".
func cpuMilli(q string) (int64, bool) {
	if m, ok := strings.CutSuffix(q, "m"); ok {
		n, err := strconv.ParseInt(m, 10, 64)
		return n, err == nil && n >= 0
	}
	f, err := strconv.ParseFloat(q, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return int64(f*1000 + 0.5), true
}
