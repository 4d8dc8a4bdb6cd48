package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCountCPUList(t *testing.T) {
	for s, want := range map[string]int{
		"0-3\n": 4, "0-3,8,10-11\n": 7, "5": 1, "": 0, "\n": 0, "0-63": 64, "3-1": 0, "a": 0, "0,,2": 2, "-1": 0,
	} {
		if got := CountCPUList(s); got != want {
			t.Errorf("CountCPUList(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestCPUsOfAProcessAndOfACpuset: the affinity of the cgroup's first process (this test's
// own, whatever taskset it runs under), else the cpuset file, else 0.
func TestCPUsOfAProcessAndOfACpuset(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if got := CPUs(dir); got != 0 {
		t.Fatalf("empty directory: %d CPUs", got)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cpuset.cpus.effective", "0-2,7\n")
	if got := CPUs(dir); got != 4 {
		t.Fatalf("cpuset 0-2,7: %d CPUs", got)
	}
	write("cgroup.procs", strconv.Itoa(os.Getpid())+"\n")
	if got := CPUs(dir); got != set.Count() {
		t.Fatalf("this process: %d CPUs, its affinity has %d", got, set.Count())
	}
	write("cgroup.procs", "999999999\n") // no such process: the cpuset file
	if got := CPUs(dir); got != 4 {
		t.Fatalf("a process gone: %d CPUs", got)
	}
}
