package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

// realV1Cgroup creates an empty cgroup in the cpu and cpuacct hierarchies of the host's
// v1 mount, with the quota given, and removes it at the end; the test is skipped where
// that cannot be done (not root, cgroup v2, a read-only mount). It returns the mount root
// and the cgroup's path relative to it.
func realV1Cgroup(t *testing.T, quotaUs int) (root, rel string) {
	t.Helper()
	root = "/sys/fs/cgroup"
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	m, err := cgroup.Detect(root)
	if err != nil || m.Version != 1 {
		t.Skipf("no v1 cpu hierarchy under %s (%v)", root, err)
	}
	rel = fmt.Sprintf("gmp-gotest-%d-%s", os.Getpid(), strings.ToLower(t.Name()))
	dirs := []string{filepath.Join(m.CPU, rel)}
	if m.Acct != m.CPU {
		dirs = append(dirs, filepath.Join(m.Acct, rel))
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				t.Fatalf("%s exists: a crashed run left it (rmdir it)", d)
			}
			t.Skipf("cannot create a cgroup: %v", err)
		}
		t.Cleanup(func() {
			if err := os.Remove(d); err != nil {
				t.Errorf("removing %s: %v", d, err)
			}
		})
	}
	writeQuota(t, filepath.Join(dirs[0], "cpu.cfs_quota_us"), quotaUs)
	return root, rel
}

func writeQuota(t *testing.T, path string, us int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strconv.Itoa(us)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLimitsRealQuotaWrite: a quota written to a real cgroup mid-run (what the kubelet
// does on an in-place resize) shows as one row with the new quota whose (prev_ns, t_ns]
// brackets the write. The kernel stores the value inside write(2), so the bracket must meet
// [start, end] of the write.
func TestLimitsRealQuotaWrite(t *testing.T) {
	root, rel := realV1Cgroup(t, 50_000)
	lim := filepath.Join(t.TempDir(), "limits.csv")
	s, sum, _ := samplerOn(t, root, "--cgroup", rel, "--interval", "1ms", "--limits-out", lim, "--limits-every", "0")
	s.begin(300 * time.Millisecond)
	done := make(chan struct{})
	go func() {
		s.run()
		close(done)
	}()
	time.Sleep(100 * time.Millisecond)
	w0 := monoNs()
	writeQuota(t, filepath.Join(s.targets[0].Dir, "cpu.cfs_quota_us"), 100_000)
	w1 := monoNs()
	<-done
	s.finish()
	if sum.StopReason != "duration" || s.exitCode() != 0 {
		t.Fatalf("stop %q exit %d", sum.StopReason, s.exitCode())
	}
	_, rows := readRows(t, lim)
	if len(rows) != 2 || sum.LimitsSeries.Changes != 1 {
		t.Fatalf("rows %q, summary %+v", rows, *sum.LimitsSeries)
	}
	if r := rows[0]; r[1] != "" || r[2] != rel || strings.Join(r[3:], ",") != "100000,50000,0" {
		t.Errorf("first row %q", r)
	}
	r := rows[1]
	tNs, _ := strconv.ParseInt(r[0], 10, 64)
	prev, _ := strconv.ParseInt(r[1], 10, 64)
	if strings.Join(r[3:], ",") != "100000,100000,0" || prev >= w1 || tNs < w0 || tNs-prev > 50_000_000 {
		t.Errorf("change row %q: (prev_ns, t_ns] does not meet the write [%d, %d]", r, w0, w1)
	}
	t.Logf("write [%d, %d]; seen in (%d, %d], %.0f µs wide", w0, w1, prev, tNs, float64(tNs-prev)/1e3)
}
