package cgroup

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// CPUs is how many CPUs the tasks of the cgroup whose files are in dir may run on: the
// affinity of the first process in its cgroup.procs (a cpuset narrows it, and so does
// taskset; the Go runtime counts the same set for NumCPU at its start), else the cgroup's
// cpuset.cpus.effective (v2, where the cpuset controller is enabled for it). 0 where
// neither can be read: a cgroup without a process of its own and without a cpuset file (a
// pod's cgroup on v2), or a process gone since.
func CPUs(dir string) int {
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		if pid, err := strconv.Atoi(string(bytes.TrimSpace(line))); err == nil && pid > 0 {
			var set unix.CPUSet
			if unix.SchedGetaffinity(pid, &set) == nil && set.Count() > 0 {
				return set.Count()
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cpuset.cpus.effective")); err == nil {
		return CountCPUList(string(b))
	}
	return 0
}

// CountCPUList counts the CPUs of a kernel CPU list ("0-3,8,10-11\n"); 0 for an empty or
// malformed one.
func CountCPUList(s string) int {
	n := 0
	for _, part := range bytes.Split(bytes.TrimSpace([]byte(s)), []byte(",")) {
		if len(part) == 0 {
			continue
		}
		lo, hi, isRange := bytes.Cut(part, []byte("-"))
		a, err := strconv.Atoi(string(lo))
		if err != nil || a < 0 {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(string(hi)); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}
