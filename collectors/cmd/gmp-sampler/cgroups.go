package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// target is one cgroup to sample, with its counter files held open.
type target struct {
	name     string // label for the optional `cgroup` column
	rel      string // path relative to the hierarchy root, as given
	version  int    // 1 or 2
	statPath string // cpu.stat
	usePath  string // v1 only: cpuacct.usage (ns); v2 reads usage_usec from cpu.stat
	dir      string // the cgroup directory holding cpu.stat (cpu hierarchy on v1)
	stat     *os.File
	usage    *os.File
	statFd   int
	useFd    int
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// resolveTarget finds the counter files of cgroup `rel` under the cgroup mount `root`.
//
// cgroup v1 mounts each controller (or a comma-joined set) as its own hierarchy:
// cpu.stat lives in the cpu hierarchy and carries no usage, which the cpuacct hierarchy
// provides as cpuacct.usage in ns. They may be separate mounts (cpu/ and cpuacct/) or one
// joined mount (cpu,cpuacct/). cgroup v2 has a single hierarchy whose cpu.stat carries
// usage_usec next to the bandwidth counters.
func resolveTarget(root, spec string) (*target, error) {
	name, rels := "", spec
	if i := strings.IndexByte(spec, '='); i >= 0 {
		name, rels = spec[:i], spec[i+1:]
	}
	// PATH may list alternatives separated by "|": the first that exists is sampled. A
	// collector that cannot see the node's tree passes every layout the kubelet may use.
	alts := strings.Split(rels, "|")
	var firstErr error
	for _, rel := range alts {
		t, err := resolveOne(root, spec, name, rel)
		if err == nil {
			return t, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if len(alts) > 1 {
		return nil, fmt.Errorf("cgroup %q: none of the %d alternatives exists under %s", spec, len(alts), root)
	}
	return nil, firstErr
}

func resolveOne(root, spec, name, rel string) (*target, error) {
	rel = strings.TrimPrefix(filepath.Clean("/"+rel), "/")
	if name == "" {
		name = rel
		if name == "" {
			name = "/"
		}
	}
	t := &target{name: name, rel: rel}

	for _, cpuDir := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		d := filepath.Join(root, cpuDir, rel)
		if !exists(filepath.Join(d, "cpu.cfs_quota_us")) {
			continue
		}
		t.version, t.dir, t.statPath = 1, d, filepath.Join(d, "cpu.stat")
		for _, accDir := range []string{cpuDir, "cpuacct", "cpu,cpuacct", "cpuacct,cpu"} {
			u := filepath.Join(root, accDir, rel, "cpuacct.usage")
			if exists(u) {
				t.usePath = u
				break
			}
		}
		if t.usePath == "" {
			return nil, fmt.Errorf("cgroup %q: found v1 %s but no cpuacct.usage in a cpuacct hierarchy under %s; "+
				"create the cgroup in the cpuacct hierarchy too", spec, t.statPath, root)
		}
		return t, nil
	}
	d := filepath.Join(root, rel)
	if exists(filepath.Join(d, "cpu.stat")) && exists(filepath.Join(root, "cgroup.controllers")) {
		t.version, t.dir, t.statPath = 2, d, filepath.Join(d, "cpu.stat")
		return t, nil
	}
	return nil, fmt.Errorf("cgroup %q: no cpu.stat under %s (looked for v1 %s and v2 %s); "+
		"check the path and that --root points at the cgroup mount",
		spec, root, filepath.Join(root, "cpu", rel), filepath.Join(root, rel, "cpu.stat"))
}

func (t *target) open() error {
	var err error
	if t.stat, err = os.Open(t.statPath); err != nil {
		return err
	}
	t.statFd = int(t.stat.Fd())
	if t.usePath != "" {
		if t.usage, err = os.Open(t.usePath); err != nil {
			return err
		}
		t.useFd = int(t.usage.Fd())
	}
	return nil
}

// selfCgroupPath returns this process's cgroup path for the cpu controller (v1), or its
// unified path (v2), as written in /proc/self/cgroup.
func selfCgroupPath(version int) string {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if version == 2 && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if version == 1 {
			for _, c := range strings.Split(parts[1], ",") {
				if c == "cpu" {
					return parts[2]
				}
			}
		}
	}
	return ""
}

// checkOutside refuses to sample a cgroup that contains the sampler: once the group
// exhausts its quota every thread in it, the sampler's included, is frozen until the next
// period, so the samples that matter most would never be taken.
func checkOutside(t *target) error {
	self := selfCgroupPath(t.version)
	// "/" is the root or a cgroup namespace's root: nothing to compare against.
	if self == "" || self == "/" {
		return nil
	}
	self = strings.TrimPrefix(filepath.Clean(self), "/")
	if self == t.rel || strings.HasPrefix(self, t.rel+"/") || t.rel == "" {
		return fmt.Errorf("the sampler runs inside cgroup %q (its own cgroup is /%s): it would be "+
			"throttled with its target; run it from the root cpu cgroup", t.rel, self)
	}
	return nil
}
