package cgroup

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The fixture trees and golden files shared with the Python tests.
var dataDir = filepath.Join("..", "..", "..", "tests", "data", "cgroup")

type wantError struct {
	File     string `json:"file"`
	Line     int    `json:"line"`
	Quote    string `json:"quote"`
	Contains string `json:"contains"`
}

type wantLimits struct {
	PeriodUs uint64     `json:"period_us"`
	QuotaUs  int64      `json:"quota_us"`
	BurstUs  uint64     `json:"burst_us"`
	Error    *wantError `json:"error"`
}

type wantStat struct {
	Usage         uint64     `json:"usage"`
	Periods       uint64     `json:"nr_periods"`
	Throttled     uint64     `json:"nr_throttled"`
	ThrottledTime uint64     `json:"throttled"`
	Bursts        uint64     `json:"nr_bursts"`
	BurstTime     uint64     `json:"burst"`
	Keys          []string   `json:"keys"`
	PSISome       *uint64    `json:"psi_some"` // nil: the case has no cpu.pressure
	PSIFull       *uint64    `json:"psi_full"` // nil: no cpu.pressure, or no full line in it
	Local         *uint64    `json:"local_throttled"`
	Error         *wantError `json:"error"`
}

type fixtureCase struct {
	Limits *wantLimits `json:"limits"`
	Stat   *wantStat   `json:"stat"`
}

func loadJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// checkError: err names the file (its full path) and the line, and quotes the text.
func checkError(t *testing.T, dir string, err error, w *wantError) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one about %s", w.File)
	}
	msg := err.Error()
	for _, s := range []string{filepath.Join(dir, w.File), w.Contains} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not contain %q", msg, s)
		}
	}
	if w.Line > 0 || w.Quote != "" {
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("error %q is not a *FormatError", msg)
		}
		if !strings.Contains(msg, "line "+strconv.Itoa(w.Line)+":") || fe.Line != w.Line {
			t.Errorf("error %q: want line %d", msg, w.Line)
		}
		if !strings.Contains(msg, w.Quote) || !strings.Contains(quote(fe.Text), w.Quote) {
			t.Errorf("error %q does not quote %q", msg, w.Quote)
		}
	}
	if len(msg) > 400 {
		t.Errorf("error message of %d bytes: quote less", len(msg))
	}
}

// TestFixtures runs every case directory of tests/data/cgroup/v{1,2} through the readers
// the sampler uses; the expected outcomes are in expected.json (the Python tests read the
// same file). A case directory without an entry, or an entry without a directory, fails.
func TestFixtures(t *testing.T) {
	var doc struct {
		Cases map[string]fixtureCase `json:"cases"`
	}
	loadJSON(t, "expected.json", &doc)
	seen := map[string]bool{}
	for _, v := range []string{"v1", "v2"} {
		ents, err := os.ReadDir(filepath.Join(dataDir, v))
		if err != nil {
			t.Fatal(err)
		}
		version := int(v[1] - '0')
		for _, e := range ents {
			id := v + "/" + e.Name()
			seen[id] = true
			c, ok := doc.Cases[id]
			if !ok {
				t.Errorf("%s: no entry in expected.json", id)
				continue
			}
			dir := filepath.Join(dataDir, v, e.Name())
			t.Run(id, func(t *testing.T) {
				if c.Limits == nil {
					t.Fatal("every case states its limits")
				}
				t.Run("limits", func(t *testing.T) { checkLimits(t, dir, version, c.Limits) })
				if c.Stat != nil {
					t.Run("stat", func(t *testing.T) { checkStat(t, dir, version, c.Stat) })
				}
			})
		}
	}
	for id := range doc.Cases {
		if !seen[id] {
			t.Errorf("expected.json names %s, which has no directory", id)
		}
	}
}

func checkLimits(t *testing.T, dir string, version int, w *wantLimits) {
	got, err := ReadLimits(dir, version)
	if w.Error != nil {
		checkError(t, dir, err, w.Error)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{Version: version, PeriodUs: w.PeriodUs, QuotaUs: w.QuotaUs, BurstUs: w.BurstUs}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// the sampler's path: files held open, every read a pread at offset 0
	r, err := OpenLimits(dir, version)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 3; i++ {
		var l Limits
		if err := r.Read(&l); err != nil || l != want {
			t.Fatalf("held read %d: %+v %v, want %+v", i, l, err, want)
		}
	}
}

func checkStat(t *testing.T, dir string, version int, w *wantStat) {
	c := &Cgroup{Version: version, StatPath: filepath.Join(dir, "cpu.stat")}
	if version == 1 {
		c.UsagePath = filepath.Join(dir, "cpuacct.usage")
	}
	r, err := c.Open() // the sampler's path: held files, pread at offset 0
	var s Stat
	if err == nil {
		defer r.Close()
		err = r.Read(&s)
	}
	if w.Error != nil {
		checkError(t, dir, err, w.Error)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{Usage: w.Usage, Periods: w.Periods, Throttled: w.Throttled, ThrottledTime: w.ThrottledTime,
		Bursts: w.Bursts, BurstTime: w.BurstTime, NsUnits: version == 1}
	if w.PSISome != nil {
		want.PSISome, want.HasPSI = *w.PSISome, true
	}
	if w.PSIFull != nil {
		want.PSIFull, want.HasPSIFull = *w.PSIFull, true
	}
	if w.Local != nil {
		want.LocalThrottled, want.HasLocal = *w.Local, true
	}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if r.HasPSI() != want.HasPSI || r.HasLocal() != want.HasLocal {
		t.Fatalf("reader has cpu.pressure %v, cpu.stat.local %v; want %v, %v", r.HasPSI(), r.HasLocal(), want.HasPSI, want.HasLocal)
	}
	// the first half of a read alone: the same counters, the signals unread
	stat, usage, err := r.ReadRawStat()
	if err == nil {
		err = r.Parse(stat, usage, &s)
	}
	want.PSISome, want.PSIFull, want.LocalThrottled = 0, 0, 0
	want.HasPSI, want.HasPSIFull, want.HasLocal = false, false, false
	if err != nil || s != want {
		t.Fatalf("cpu.stat alone: %+v %v, want %+v", s, err, want)
	}
	if w.Keys != nil {
		b, _ := os.ReadFile(c.StatPath)
		fields, err := ParseKeyed(c.StatPath, b)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, f := range fields {
			keys = append(keys, f.Key)
		}
		if !reflect.DeepEqual(keys, w.Keys) {
			t.Fatalf("keys %v, want %v", keys, w.Keys)
		}
	}
}

// The sampler's hot path: pread and parse allocate nothing.
func TestReadAllocatesNothing(t *testing.T) {
	for _, v := range []string{"v1/set", "v2/set", "v2/signals"} {
		dir := filepath.Join(dataDir, v)
		c := &Cgroup{Version: int(v[1] - '0'), StatPath: filepath.Join(dir, "cpu.stat")}
		if c.Version == 1 {
			c.UsagePath = filepath.Join(dir, "cpuacct.usage")
		}
		r, err := c.Open()
		if err != nil {
			t.Fatal(err)
		}
		var s Stat
		if n := testing.AllocsPerRun(200, func() {
			if err := r.Read(&s); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per read", v, n)
		}
		if want := v == "v2/signals"; s.HasPSI != want || s.HasPSIFull != want || s.HasLocal != want {
			t.Errorf("%s: read %+v", v, s)
		}
		r.Close()

		lr, err := OpenLimits(dir, c.Version)
		if err != nil {
			t.Fatal(err)
		}
		var l Limits
		if n := testing.AllocsPerRun(200, func() {
			if err := lr.Read(&l); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s limits: %v allocations per read", v, n)
		}
		lr.Close()
	}
}

// copyCase copies the fixture case v/name into a fresh directory (ordinary files: a held
// descriptor rereads them at offset 0 as it does the kernel's) and returns it.
func copyCase(t *testing.T, v, name string) string {
	t.Helper()
	src := filepath.Join(dataDir, v, name)
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// rewrite replaces a file's content in place (same inode, as a write to a cgroup file).
func rewrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLimitsReaderSeesRewrites: a limit rewritten between two reads (an in-place resize)
// is what the next read through the same descriptors returns.
func TestLimitsReaderSeesRewrites(t *testing.T) {
	for _, c := range []struct {
		v, file, content string
		before, after    Limits
	}{
		{"v1", "cpu.cfs_quota_us", "100000\n",
			Limits{1, 100_000, 50_000, 0}, Limits{1, 100_000, 100_000, 0}},
		{"v1", "cpu.cfs_quota_us", "-1\n",
			Limits{1, 100_000, 50_000, 0}, Limits{1, 100_000, NoQuota, 0}},
		{"v1", "cpu.cfs_period_us", "50000\n",
			Limits{1, 100_000, 50_000, 0}, Limits{1, 50_000, 50_000, 0}},
		{"v1", "cpu.cfs_burst_us", "20000\n",
			Limits{1, 100_000, 50_000, 0}, Limits{1, 100_000, 50_000, 20_000}},
		{"v2", "cpu.max", "150000 100000\n",
			Limits{2, 100_000, 50_000, 0}, Limits{2, 100_000, 150_000, 0}},
		{"v2", "cpu.max", "max 50000\n",
			Limits{2, 100_000, 50_000, 0}, Limits{2, 50_000, NoQuota, 0}},
		{"v2", "cpu.max.burst", "1000\n",
			Limits{2, 100_000, 50_000, 0}, Limits{2, 100_000, 50_000, 1000}},
	} {
		t.Run(c.v+"/"+c.file, func(t *testing.T) {
			dir := copyCase(t, c.v, "set")
			r, err := OpenLimits(dir, int(c.v[1]-'0'))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var l Limits
			if err := r.Read(&l); err != nil || l != c.before {
				t.Fatalf("before: %+v %v, want %+v", l, err, c.before)
			}
			rewrite(t, filepath.Join(dir, c.file), c.content)
			if err := r.Read(&l); err != nil || l != c.after {
				t.Fatalf("after: %+v %v, want %+v", l, err, c.after)
			}
		})
	}
}

// TestLimitsReaderErrors: a value rewritten to garbage is a *FormatError naming the file
// and leaves l as it was; a file that no longer reads is a *GoneError.
func TestLimitsReaderErrors(t *testing.T) {
	dir := copyCase(t, "v1", "set")
	r, err := OpenLimits(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var l Limits
	if err := r.Read(&l); err != nil {
		t.Fatal(err)
	}
	before := l
	qp := filepath.Join(dir, "cpu.cfs_quota_us")
	rewrite(t, qp, "0\n")
	var fe *FormatError
	if err := r.Read(&l); !errors.As(err, &fe) || fe.Path != qp || l != before {
		t.Fatalf("quota 0: %v (%T), limits %+v", err, err, l)
	}
	rewrite(t, qp, strings.Repeat("9", 200))
	if err := r.Read(&l); !errors.As(err, &fe) || !strings.Contains(err.Error(), "read buffer") {
		t.Fatalf("200 digits: %v", err)
	}
	rewrite(t, qp, "50000\n")
	// A removed cgroup answers reads through held descriptors with ENODEV; a closed
	// descriptor fails the same way here.
	r.files[2].f.Close()
	var ge *GoneError
	if err := r.Read(&l); !errors.As(err, &ge) || ge.Path != filepath.Join(dir, "cpu.cfs_burst_us") {
		t.Fatalf("closed burst file: %v (%T)", err, err)
	}
	r.files[2].f = nil

	if _, err := OpenLimits(dir, 3); err == nil {
		t.Error("version 3 accepted")
	}
}

func TestParseUint(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "7": 7, "18446744073709551615": 1<<64 - 1} {
		if got, ok := parseUint([]byte(in)); !ok || got != want {
			t.Errorf("%q: %d %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-1", "+1", " 1", "1 ", "1a", "18446744073709551616", "99999999999999999999",
		"000000000000000000001", "00000000000000000001", "01", "00", "\uff15", "\u00b2", "\u0663", "1\xff", strings.Repeat("9", 5000)} {
		if got, ok := parseUint([]byte(in)); ok {
			t.Errorf("%q accepted as %d", in, got)
		}
	}
	for in, want := range map[string]int64{"-1": -1, "0": 0, "-9223372036854775808": -1 << 63, "9223372036854775807": 1<<63 - 1} {
		if got, ok := parseInt([]byte(in)); !ok || got != want {
			t.Errorf("%q: %d %v", in, got, ok)
		}
	}
	for _, in := range []string{"--5", "-", "-0", "-05", "+5", "9223372036854775808", "-9223372036854775809", "- 1"} {
		if got, ok := parseInt([]byte(in)); ok {
			t.Errorf("%q accepted as %d", in, got)
		}
	}
}

type pathsDoc struct {
	Candidates []struct {
		ID          string   `json:"id"`
		PodUID      string   `json:"pod_uid"`
		QoS         string   `json:"qos"`
		ContainerID string   `json:"container_id"`
		Pod         []string `json:"pod"`
		Container   []string `json:"container"`
	} `json:"candidates"`
	Invalid []struct {
		ID          string `json:"id"`
		PodUID      string `json:"pod_uid"`
		QoS         string `json:"qos"`
		ContainerID string `json:"container_id"`
		Error       string `json:"error"`
	} `json:"invalid"`
	Trees map[string]struct {
		Root   map[string]*string `json:"root"`
		Cgroup map[string]*string `json:"cgroup"`
	} `json:"trees"`
	Layouts []struct {
		ID            string `json:"id"`
		Version       int    `json:"version"`
		QoS           string `json:"qos"`
		PodUID        string `json:"pod_uid"`
		ContainerID   string `json:"container_id"`
		PodPath       string `json:"pod_path"`
		ContainerPath string `json:"container_path"`
	} `json:"layouts"`
	Lookups []struct {
		ID    string             `json:"id"`
		Files map[string]*string `json:"files"`
		Spec  string             `json:"spec"`
		Want  struct {
			Name     string  `json:"name"`
			Rel      string  `json:"rel"`
			Version  int     `json:"version"`
			Stat     string  `json:"stat"`
			Usage    *string `json:"usage"`
			Error    string  `json:"error"`
			Contains string  `json:"contains"`
		} `json:"want"`
	} `json:"lookups"`
}

// writeFiles makes a tree: a value is a file's content; nil or a path ending in "/" is a directory.
func writeFiles(t *testing.T, root string, files map[string]*string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if content == nil || strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(*content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCandidates(t *testing.T) {
	var doc pathsDoc
	loadJSON(t, "paths.json", &doc)
	for _, c := range doc.Candidates {
		t.Run(c.ID, func(t *testing.T) {
			pod, err := PodCandidates(c.PodUID, c.QoS)
			if err != nil || !reflect.DeepEqual(pod, c.Pod) {
				t.Fatalf("pod: %v %v, want %v", pod, err, c.Pod)
			}
			ctr, err := ContainerCandidates(c.PodUID, c.QoS, c.ContainerID)
			if err != nil || !reflect.DeepEqual(ctr, c.Container) {
				t.Fatalf("container: %v %v, want %v", ctr, err, c.Container)
			}
		})
	}
	for _, c := range doc.Invalid {
		t.Run("invalid-"+c.ID, func(t *testing.T) {
			_, err := ContainerCandidates(c.PodUID, c.QoS, c.ContainerID)
			if err == nil || !strings.Contains(err.Error(), c.Error) {
				t.Fatalf("got %v, want an error about %s", err, c.Error)
			}
		})
	}
}

// TestLayouts: on a node tree of every version × driver × QoS × runtime, the "|"-joined
// candidates (what the sampler gets from the collector) resolve to the kubelet's path.
func TestLayouts(t *testing.T) {
	var doc pathsDoc
	loadJSON(t, "paths.json", &doc)
	if len(doc.Layouts) != 36 {
		t.Fatalf("%d layouts, want 2 versions × 2 drivers × 3 QoS × 3 runtimes", len(doc.Layouts))
	}
	for _, l := range doc.Layouts {
		t.Run(l.ID, func(t *testing.T) {
			root := t.TempDir()
			tree := doc.Trees[strconv.Itoa(l.Version)]
			writeFiles(t, root, tree.Root)
			parts := strings.Split(l.ContainerPath, "/")
			for i := 1; i <= len(parts); i++ {
				dir := strings.Join(parts[:i], "/")
				files := map[string]*string{}
				for p, c := range tree.Cgroup {
					files[strings.ReplaceAll(p, "{}", dir)] = c
				}
				writeFiles(t, root, files)
			}
			m, err := Detect(root)
			if err != nil || m.Version != l.Version {
				t.Fatalf("Detect: %+v %v", m, err)
			}
			ctr, _ := ContainerCandidates(l.PodUID, l.QoS, l.ContainerID)
			got, err := m.Resolve(strings.Join(ctr, "|"))
			if err != nil || got.Rel != l.ContainerPath || got.Version != l.Version {
				t.Fatalf("container: %+v %v, want %s", got, err, l.ContainerPath)
			}
			pod, _ := PodCandidates(l.PodUID, l.QoS)
			got, err = m.Resolve("pod=" + strings.Join(pod, "|"))
			if err != nil || got.Rel != l.PodPath || got.Name != "pod" {
				t.Fatalf("pod: %+v %v, want %s", got, err, l.PodPath)
			}
			// what the collector passes: the API's facts, expanded here
			got, err = m.Resolve("kube-container:" + l.PodUID + ":" + l.QoS + ":" + l.ContainerID)
			if err != nil || got.Rel != l.ContainerPath {
				t.Fatalf("kube-container: %+v %v, want %s", got, err, l.ContainerPath)
			}
			got, err = m.Resolve("pod=kube-pod:" + l.PodUID + ":" + l.QoS)
			if err != nil || got.Rel != l.PodPath || got.Name != "pod" {
				t.Fatalf("kube-pod: %+v %v, want %s", got, err, l.PodPath)
			}
		})
	}
}

func TestLookups(t *testing.T) {
	var doc pathsDoc
	loadJSON(t, "paths.json", &doc)
	for _, c := range doc.Lookups {
		t.Run(c.ID, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, c.Files)
			m, err := Detect(root)
			var got *Target
			if err == nil {
				got, err = m.Resolve(c.Spec)
			}
			w := c.Want
			if w.Error != "" {
				if err == nil {
					t.Fatalf("found %+v, want a %s error", got.Cgroup, w.Error)
				}
				kind := "invalid"
				if errors.Is(err, ErrNoController) {
					kind = "no_controller"
				} else if errors.Is(err, fs.ErrNotExist) {
					kind = "not_exist"
				}
				if kind != w.Error || !strings.Contains(err.Error(), w.Contains) {
					t.Fatalf("error %q (%s), want %s containing %q", err, kind, w.Error, w.Contains)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			usage := ""
			if w.Usage != nil {
				usage = filepath.Join(root, *w.Usage)
			}
			if got.Name != w.Name || got.Rel != w.Rel || got.Version != w.Version ||
				got.StatPath != filepath.Join(root, w.Stat) || got.UsagePath != usage {
				t.Fatalf("got %s %+v", got.Name, got.Cgroup)
			}
		})
	}
}

func TestContains(t *testing.T) {
	cases := []struct {
		rel, self string
		want      bool
	}{
		{"a/b", "/a/b", true}, {"a/b", "/a/b/c", true}, {"a/b", "/a/bc", false}, {"a", "/", false},
		{"a", "", false}, {"", "/x", true}, {"a/b", "/a", false},
	}
	for _, c := range cases {
		if got := Contains(c.rel, c.self); got != c.want {
			t.Errorf("Contains(%q, %q) = %v", c.rel, c.self, got)
		}
	}
	proc := []byte("12:pids:/x\n4:cpu,cpuacct:/kubepods/pod1/c\n0::/user.slice/u.scope\n")
	if got := ProcCgroupPath(proc, 1); got != "/kubepods/pod1/c" {
		t.Errorf("v1: %q", got)
	}
	if got := ProcCgroupPath(proc, 2); got != "/user.slice/u.scope" {
		t.Errorf("v2: %q", got)
	}
}

func TestKubeSpecsAreValidated(t *testing.T) {
	for _, arg := range []string{
		"kube-container:uid-only",
		"kube-container:0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b:Burstable:nope://x",
		"kube-container:../../etc:Burstable:containerd://abc",
		"kube-pod:0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b:Premium",
		"kube-pod:a:b:c",
		"kube-node:x",
	} {
		if alts, err := ExpandKube(arg); err == nil {
			t.Errorf("%q expanded to %v, want an error", arg, alts)
		}
	}
}

// makeSpecial puts at path a file of the given kind (tests/data/cgroup/special.json).
func makeSpecial(t *testing.T, path, kind string) {
	t.Helper()
	os.Remove(path)
	var err error
	switch kind {
	case "fifo":
		err = unix.Mkfifo(path, 0o644)
	case "dev-zero":
		err = os.Symlink("/dev/zero", path)
	case "dev-null":
		err = os.Symlink("/dev/null", path)
	case "socket":
		var l net.Listener
		if l, err = net.Listen("unix", path); err == nil {
			t.Cleanup(func() { l.Close() })
		}
	case "symlink-loop":
		err = os.Symlink(filepath.Base(path), path)
	case "one-mebibyte":
		err = os.WriteFile(path, bytes.Repeat([]byte("1"), 1<<20), 0o644)
	default:
		t.Fatalf("unknown kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestSpecialFiles: what git cannot hold in a fixture (a FIFO, a device, a socket, a
// symlink loop, a file larger than any the kernel writes) in a cgroup file's place is an
// error that names the file, found without blocking or an unbounded read.
func TestSpecialFiles(t *testing.T) {
	var doc struct {
		Cases []struct {
			ID       string  `json:"id"`
			Base     *string `json:"base"`
			Reader   string  `json:"reader"`
			File     string  `json:"file"`
			Kind     string  `json:"kind"`
			Contains *string `json:"contains"`
		} `json:"cases"`
	}
	loadJSON(t, "special.json", &doc)
	for _, c := range doc.Cases {
		t.Run(c.ID, func(t *testing.T) {
			dir := t.TempDir()
			if c.Base != nil {
				v, name, _ := strings.Cut(*c.Base, "/")
				dir = copyCase(t, v, name)
			}
			path := filepath.Join(dir, c.File)
			makeSpecial(t, path, c.Kind)
			done := make(chan error, 1)
			go func() {
				switch c.Reader {
				case "limits":
					_, err := ReadLimits(dir, int(c.ID[1]-'0'))
					done <- err
				case "stat":
					version := int(c.ID[1] - '0')
					m := Mount{Root: dir, Version: version, CPU: dir, Acct: dir}
					cg, err := m.Lookup("")
					if err == nil {
						var r *Reader
						if r, err = cg.Open(); err == nil {
							var s Stat
							err = r.Read(&s)
							r.Close()
						}
					}
					done <- err
				case "detect":
					_, err := Detect(dir)
					if !errors.Is(err, ErrNoController) {
						err = fmt.Errorf("want ErrNoController, got %v", err)
					} else {
						err = nil
					}
					done <- err
				}
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("still reading after 10 s")
			}
			if c.Contains == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, path) || !strings.Contains(msg, *c.Contains) {
				t.Errorf("error %q: want the path and %q", msg, *c.Contains)
			}
			var fe *FormatError
			var fi *FileError
			if !errors.As(err, &fe) && !errors.As(err, &fi) {
				t.Errorf("error %q is a %T, want *FormatError or *FileError", msg, err)
			}
		})
	}
}

func TestFacts(t *testing.T) {
	if Facts(nil) != nil {
		t.Error("facts of no error")
	}
	_, err := ReadLimits(filepath.Join(dataDir, "v2", "max-period-too-long"), 2)
	f := Facts(fmt.Errorf("cgroup %q: %w", "g", err))
	if f.Kind != "format" || f.Line != 1 || !strings.HasSuffix(f.Path, "cpu.max") ||
		!strings.Contains(f.Message, `got "max 1000001"`) || !strings.Contains(f.Reason, "period") {
		t.Errorf("%+v", f)
	}
	dir := copyCase(t, "v1", "set")
	makeSpecial(t, filepath.Join(dir, "cpu.cfs_quota_us"), "fifo")
	_, err = ReadLimits(dir, 1)
	if f := Facts(err); f.Kind != "file" || f.Reason != "is a FIFO" {
		t.Errorf("%+v", f)
	}
	if f := Facts(&GoneError{Path: "p", Err: fs.ErrClosed}); f.Kind != "gone" || f.Path != "p" {
		t.Errorf("%+v", f)
	}
	if f := Facts(&NotExistError{"no"}); f.Kind != "not_exist" || f.Message != "no" {
		t.Errorf("%+v", f)
	}
	if f := Facts(errors.New("x")); f.Kind != "other" {
		t.Errorf("%+v", f)
	}
}

// TestKubeletCgroupRoot: a kubelet with a --cgroup-root of its own puts the pods under it:
// kind runs it with the systemd driver and cgroupRoot /kubelet, so a burstable pod is at
// kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/
// kubelet-kubepods-burstable-pod<UID_>.slice (each slice named after its whole path); with
// cgroupfs, kubelet/kubepods/burstable/pod<UID>. The collector's kube- arguments find both.
func TestKubeletCgroupRoot(t *testing.T) {
	var doc pathsDoc
	loadJSON(t, "paths.json", &doc)
	uid := "0f2c9c1e-6a41-4a8e-9d0b-5d1c2e3f4a5b"
	us := strings.ReplaceAll(uid, "-", "_")
	cid := strings.Repeat("ab", 32)
	for _, c := range []struct{ qos, pod, ctr string }{
		{"Burstable", "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + us + ".slice",
			"cri-containerd-" + cid + ".scope"},
		{"Guaranteed", "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + us + ".slice", "cri-containerd-" + cid + ".scope"},
		{"BestEffort", "kubelet/kubepods/besteffort/pod" + uid, cid},
	} {
		t.Run(c.qos, func(t *testing.T) {
			root := t.TempDir()
			tree := doc.Trees["2"]
			writeFiles(t, root, tree.Root)
			path := c.pod + "/" + c.ctr
			parts := strings.Split(path, "/")
			for i := 1; i <= len(parts); i++ {
				files := map[string]*string{}
				for p, content := range tree.Cgroup {
					files[strings.ReplaceAll(p, "{}", strings.Join(parts[:i], "/"))] = content
				}
				writeFiles(t, root, files)
			}
			m, err := Detect(root)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Resolve("kube-container:" + uid + ":" + c.qos + ":containerd://" + cid)
			if err != nil || got.Rel != path {
				t.Fatalf("kube-container: %+v %v, want %s", got, err, path)
			}
			got, err = m.Resolve("pod=kube-pod:" + uid + ":" + c.qos)
			if err != nil || got.Rel != c.pod {
				t.Fatalf("kube-pod: %+v %v, want %s", got, err, c.pod)
			}
		})
	}
}

// The kernel keeps nr_periods, nr_throttled and nr_bursts in ints and prints them with %d:
// past 2^31 they print negative (6.8 years of 100 ms periods, 24.8 days of 1 ms ones). They
// read as the 32-bit counts they are; other keys, and values below int's range, stay refused.
func TestIntCountersPastTwoToTheThirtyOne(t *testing.T) {
	data := "nr_periods -2147483648\nnr_throttled -1\nthrottled_time 5\nnr_bursts -2147483647\nburst_time 0\n"
	var s Stat
	if err := ParseStat(fuzzPath, []byte(data), 1, &s); err != nil {
		t.Fatal(err)
	}
	if s.Periods != 1<<31 || s.Throttled != 1<<32-1 || s.Bursts != 1<<31+1 || s.ThrottledTime != 5 {
		t.Fatalf("%+v", s)
	}
	for _, bad := range []string{
		"nr_periods -2147483649\n", "nr_periods -0\n", "throttled_time -5\nnr_periods 1\n",
		"nr_periods 1\nusage_usec -3\n",
	} {
		if err := ParseStat(fuzzPath, []byte(bad), 1, &s); err == nil {
			t.Errorf("%q accepted as %+v", bad, s)
		} else {
			checkFormatError(t, []byte(bad), err)
		}
	}
}
