package main

import (
	"os"
	"path/filepath"
	"strings"
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
			got := string(appendRow(nil, "g", 100, 7, &st, columns{}))
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
	if n := testing.AllocsPerRun(100, func() { row = appendRow(row[:0], "ctr", 100, 7, &st, columns{cgroup: true}) }); n != 0 {
		t.Fatalf("%v allocations per row", n)
	}
}

// The v2 columns: values where the target has the file, empty fields where it does not
// (never 0), and no allocation.
func TestAppendRowSignals(t *testing.T) {
	all := columns{signals: true, cgroup: true}
	for _, c := range []struct {
		name string
		st   cgroup.Stat
		cols columns
		want string
	}{
		{"6.6", cgroup.Stat{Usage: 5, PSISome: 11, PSIFull: 10, LocalThrottled: 3, HasPSI: true, HasPSIFull: true, HasLocal: true},
			all, "100,7,5,0,0,0,0,0,11,10,3,pod\n"},
		{"zeros-are-written", cgroup.Stat{HasPSI: true, HasPSIFull: true, HasLocal: true},
			all, "100,7,0,0,0,0,0,0,0,0,0,pod\n"},
		{"before-5.13-no-full-line", cgroup.Stat{Usage: 5, PSISome: 11, HasPSI: true, LocalThrottled: 3, HasLocal: true},
			all, "100,7,5,0,0,0,0,0,11,,3,pod\n"},
		{"before-6.6-no-cpu.stat.local", cgroup.Stat{Usage: 5, PSISome: 11, PSIFull: 10, HasPSI: true, HasPSIFull: true},
			all, "100,7,5,0,0,0,0,0,11,10,,pod\n"},
		{"psi-off", cgroup.Stat{Usage: 5, LocalThrottled: 3, HasLocal: true}, all, "100,7,5,0,0,0,0,0,,,3,pod\n"},
		// a v1 target appended to a file begun with the columns
		{"v1-neither", cgroup.Stat{Usage: 5000, NsUnits: true}, columns{signals: true}, "100,7,5.000,0,0,0.000,0,0.000,,,\n"},
		// a file without the columns: the values are left out
		{"no-columns", cgroup.Stat{Usage: 5, PSISome: 11, HasPSI: true}, columns{}, "100,7,5,0,0,0,0,0\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := string(appendRow(nil, "pod", 100, 7, &c.st, c.cols)); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
	st := cgroup.Stat{Usage: 5, PSISome: 11, PSIFull: 10, LocalThrottled: 3, HasPSI: true, HasPSIFull: true, HasLocal: true}
	row := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { row = appendRow(row[:0], "ctr", 100, 7, &st, all) }); n != 0 {
		t.Fatalf("%v allocations per row", n)
	}
}

// TestOpenOutputColumns: a new file gets the header of the columns asked for; an existing
// one keeps its header's columns, whatever this run's targets have; a header the sampler
// does not write, or one without the cgroup column for several targets, is refused; a last
// line cut by a killed sampler is cut off, so the next row starts a line of its own, and a
// file holding only a cut header (or a crash's zero bytes) is begun again.
func TestOpenOutputColumns(t *testing.T) {
	none, sig := columns{}, columns{signals: true}
	multi, sigMulti := columns{cgroup: true}, columns{signals: true, cgroup: true}
	for _, c := range []struct {
		name     string
		existing *string // nil: no file
		want     columns
		got      columns
		refused  string
		after    *string // the file once opened, where not as it was
	}{
		{name: "new-v1", want: none, got: none},
		{name: "new-v2", want: sig, got: sig},
		{name: "new-v2-several", want: sigMulti, got: sigMulti},
		{name: "old-file-v2-run", existing: ptr(csvHeader + "\n1,1,1,1,1,1,1,1\n"), want: sig, got: none},
		{name: "v2-file-v1-run", existing: ptr(csvHeader + signalsHeader + "\n1,1,1,1,1,1,1,1,2,,\n"), want: none, got: sig},
		{name: "several-file-one-target", existing: ptr(csvHeader + signalsHeader + ",cgroup\n"), want: sig, got: sigMulti},
		{name: "old-several-file-v2-run", existing: ptr(csvHeader + ",cgroup\n"), want: sigMulti, got: multi},
		{name: "one-target-file-several", existing: ptr(csvHeader + "\n"), want: multi, refused: "no cgroup column"},
		{name: "foreign-header", existing: ptr("a,b,c\n1,2,3\n"), want: none, refused: "not a header this collector writes"},
		// a header cut by a crash, before any row: begun again
		{name: "header-cut", existing: ptr("t_ns,read_ns,usage_us"), want: none, got: none, after: ptr(csvHeader + "\n")},
		{name: "zeros", existing: ptr("\x00\x00\x00"), want: sig, got: sig, after: ptr(csvHeader + signalsHeader + "\n")},
		{name: "cut-row", existing: ptr(csvHeader + "\n1,1,1,1,1,1,1,1\n2,2,2"), want: none, got: none,
			after: ptr(csvHeader + "\n1,1,1,1,1,1,1,1\n")},
		{name: "longer-header", existing: ptr(csvHeader + signalsHeader + ",extra_us\n"), want: sig, refused: "not a header this collector writes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "cpu_stat.csv")
			before := ""
			if c.existing != nil {
				before = *c.existing
				if err := os.WriteFile(p, []byte(before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			w, got, err := openOutput(p, c.want)
			b, _ := os.ReadFile(p)
			if c.refused != "" {
				if err == nil || !strings.Contains(err.Error(), c.refused) || string(b) != before {
					t.Fatalf("error %v, file %q: want it refused (%q) and left as it was", err, b, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			if got != c.got {
				t.Errorf("columns %+v, want %+v", got, c.got)
			}
			if c.existing == nil && string(b) != c.want.header()+"\n" {
				t.Errorf("new file %q", b)
			}
			if c.after != nil {
				before = *c.after
			}
			if c.existing != nil && string(b) != before {
				t.Errorf("existing file is %q, want %q", b, before)
			}
		})
	}
	if sigMulti.header() != "t_ns,read_ns,usage_us,nr_periods,nr_throttled,throttled_us,nr_bursts,burst_us,"+
		"psi_some_us,psi_full_us,local_throttled_us,cgroup" {
		t.Errorf("header %q", sigMulti.header())
	}
}

func ptr(s string) *string { return &s }

// TestCgroupNameIsQuoted: a --cgroup name given on the command line may hold a comma or a
// quote; the cgroup column is quoted as CSV then, as limits.csv's is, so the row keeps its
// columns.
func TestCgroupNameIsQuoted(t *testing.T) {
	var st cgroup.Stat
	got := string(appendRow(nil, `web,"app"`, 100, 7, &st, columns{cgroup: true}))
	if !strings.HasSuffix(got, `,"web,""app"""`+"\n") {
		t.Fatalf("%q", got)
	}
}
