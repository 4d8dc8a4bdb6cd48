package main

import (
	"os"
	"testing"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

func TestAppendRow(t *testing.T) {
	cases := []struct {
		name    string
		version int
		stat    string
		usage   string
		want    string
	}{
		{
			// v1: throttled_time and burst_time in ns, usage from cpuacct.usage in ns.
			name: "v1", version: 1,
			stat:  "nr_periods 12\nnr_throttled 5\nthrottled_time 145000123\nnr_bursts 0\nburst_time 0\n",
			usage: "2500000789\n",
			want:  "100,7,2500000.789,12,5,145000.123,0,0.000\n",
		},
		{
			// v2: µs already; unknown keys (cpu.stat of 6.x) are skipped.
			name: "v2", version: 2,
			stat: "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\ncore_sched.force_idle_usec 0\n" +
				"nr_periods 12\nnr_throttled 5\nthrottled_usec 145000\nnr_bursts 1\nburst_usec 300\n",
			want: "100,7,2500000,12,5,145000,1,300\n",
		},
		{
			// v1 without burst keys (kernels before 5.16).
			name: "v1-old", version: 1,
			stat:  "nr_periods 1\nnr_throttled 0\nthrottled_time 0\n",
			usage: "999\n",
			want:  "100,7,0.999,1,0,0.000,0,0.000\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var st cgroup.Stat
			if err := cgroup.ParseStat("cpu.stat", []byte(c.stat), c.version, &st); err != nil {
				t.Fatal(err)
			}
			if c.version == 1 {
				u, err := cgroup.ParseUsage("cpuacct.usage", []byte(c.usage))
				if err != nil {
					t.Fatal(err)
				}
				st.Usage = u
			}
			got := string(appendRow(nil, "g", 100, 7, &st, false))
			if got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

// The hot loop's formatting allocates nothing (the read and parse are checked in
// internal/cgroup).
func TestAppendRowAllocs(t *testing.T) {
	st := cgroup.Stat{Usage: 2500000789, Periods: 12, Throttled: 5, ThrottledTime: 145000123, NsUnits: true}
	row := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { row = appendRow(row[:0], "ctr", 100, 7, &st, true) }); n != 0 {
		t.Fatalf("%v allocations per row", n)
	}
}

// The v2 columns: values where the target has the file, empty fields where it does not
// (never 0), and no allocation.
func TestAppendRowV2Columns(t *testing.T) {
	st := cgroup.Stat{Usage: 5, PSISome: 11, PSIFull: 10, HasPSIFull: true, LocalThrottled: 3}
	got := string(appendRowV2(nil, "pod", 100, 7, &st, true, &v2Cols{psi: true, local: true}))
	if want := "100,7,5,0,0,0,0,0,11,10,3,pod\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	st.HasPSIFull = false
	got = string(appendRowV2(nil, "ctr", 100, 7, &st, true, &v2Cols{psi: true}))
	if want := "100,7,5,0,0,0,0,0,11,,,ctr\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	row := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		row = appendRowV2(row[:0], "ctr", 100, 7, &st, true, &v2Cols{psi: true, local: true})
	}); n != 0 {
		t.Fatalf("%v allocations per row", n)
	}
}

// A file begun without the v2 columns keeps its shape when appended to.
func TestOpenOutputKeepsAnOldHeader(t *testing.T) {
	p := t.TempDir() + "/cpu_stat.csv"
	if err := os.WriteFile(p, []byte(csvHeader+"\n1,1,1,1,1,1,1,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, v2, err := openOutput(p, false, true)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if v2 {
		t.Fatal("rows with the v2 columns would not match the file's header")
	}
	p2 := t.TempDir() + "/new.csv"
	w, v2, err = openOutput(p2, true, true)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, _ := os.ReadFile(p2)
	if !v2 || string(b) != csvHeader+v2Header+",cgroup\n" {
		t.Fatalf("v2 %v, header %q", v2, b)
	}
}
