package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Table-driven over testdata/proc-stat: one file per case, named for it.
func TestParseProcStat(t *testing.T) {
	cases := []struct {
		file    string
		ticks   [8]uint64
		ncpu    int
		errPart string
	}{
		// a real /proc/stat of this 2-vCPU VM (shortened intr line)
		{file: "vm-2cpu", ticks: [8]uint64{20408, 0, 5299, 43671, 447, 0, 95, 30}, ncpu: 2},
		// guest (400) and guest_nice (25) are already inside user and nice: not read
		{file: "guest-time", ticks: [8]uint64{1000, 50, 300, 8000, 20, 1, 2, 7}, ncpu: 1},
		{file: "no-steal", errPart: "has 7 fields, need 8"},
		{file: "garbled", errPart: `field 5 of the aggregate cpu line is not a number: "cpu  1000 50 300 8000 x20`},
		{file: "no-cpu-line", errPart: `no aggregate "cpu " line`},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "proc-stat", c.file))
			if err != nil {
				t.Fatal(err)
			}
			h, err := parseProcStat(b)
			if c.errPart != "" {
				if err == nil || !strings.Contains(err.Error(), c.errPart) {
					t.Fatalf("error %v, want one containing %q", err, c.errPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.ticks != c.ticks || h.ncpu != c.ncpu {
				t.Fatalf("got %v ncpu %d, want %v ncpu %d", h.ticks, h.ncpu, c.ticks, c.ncpu)
			}
		})
	}
}

func TestHostRowUnits(t *testing.T) {
	h := hostCPU{ticks: [8]uint64{20408, 0, 5299, 43671, 447, 0, 95, 30}, ncpu: 2}
	// USER_HZ 100: a tick is 10 ms = 10 000 µs
	got := string(appendHostRow(nil, 123, 45, h, 100))
	want := "123,45,204080000,0,52990000,436710000,4470000,0,950000,300000,699500000,2\n"
	if got != want {
		t.Fatalf("row %q, want %q", got, want)
	}
	if len(strings.Split(strings.TrimSpace(hostStatHeader), ",")) != len(strings.Split(strings.TrimSpace(got), ",")) {
		t.Fatal("header and row differ in field count")
	}
	var m map[string]map[string]int64
	if err := json.Unmarshal(appendHostJSON(nil, 123, 45, h, 100), &m); err != nil {
		t.Fatal(err)
	}
	j := m["host_stat"]
	if j["t_ns"] != 123 || j["steal_us"] != 300000 || j["cpu_total_us"] != 699500000 || j["ncpu"] != 2 || len(j) != 12 {
		t.Fatalf("json row %v", j)
	}
	if ticksToUs(7, 300) != 23333 { // a USER_HZ that does not divide 1e6 still converts
		t.Fatal(ticksToUs(7, 300))
	}
}

func TestUserHZFromAuxv(t *testing.T) {
	// USER_HZ is 100 on every Linux architecture; kernel HZ (250 here) must not leak in
	if hz := userHZ(); hz != 100 {
		t.Fatalf("userHZ() = %d, want 100", hz)
	}
}

func TestReadRealProcStat(t *testing.T) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Skip("no /proc/stat:", err)
	}
	h, err := parseProcStat(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.ncpu < 1 || h.ticks[3] == 0 {
		t.Fatalf("implausible %+v", h)
	}
}

// TestBigProcStatIsReadWhole: one cpuN line per CPU, so /proc/stat outgrows the first
// 64 KiB read at about 1,100 CPUs (long-running counters): the read grows its buffer and
// counts every CPU, instead of parsing a cut file.
func TestBigProcStatIsReadWhole(t *testing.T) {
	var b strings.Builder
	b.WriteString("cpu  2592000000 0 259200000 25920000000 0 0 0 0 0 0\n")
	for i := 0; i < 1920; i++ {
		b.WriteString("cpu" + strconv.Itoa(i) + " 1350000000 0 135000000 13500000000 0 0 0 0 0 0\n")
	}
	b.WriteString("intr 1 0\nctxt 1\nbtime 1\nprocesses 1\nprocs_running 1\nprocs_blocked 0\n")
	if b.Len() <= 1<<16 {
		t.Fatalf("the file must outgrow the first read: %d bytes", b.Len())
	}
	path := filepath.Join(t.TempDir(), "stat")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	out, err := os.Create(filepath.Join(t.TempDir(), "host_stat.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	h := &hostStat{fd: fd, buf: make([]byte, 1<<16), userHz: 100, every: 1e9, row: make([]byte, 0, 512), w: out}
	h.sample()
	row, err := os.ReadFile(out.Name())
	if err != nil || h.errs != 0 || !strings.HasSuffix(strings.TrimSpace(string(row)), ",1920") {
		t.Fatalf("errs %d, row %q, %v", h.errs, row, err)
	}
}
