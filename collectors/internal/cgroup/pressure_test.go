package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	psiSome = "some avg10=0.00 avg60=0.00 avg300=0.00 total="
	psiFull = "full avg10=0.00 avg60=0.00 avg300=0.00 total="
)

func TestParsePressure(t *testing.T) {
	cases := []struct {
		name       string
		data       string
		some, full uint64
		hasFull    bool
		line       int    // a *FormatError at this line; 0: none
		quote      string // it quotes this
		reason     string // and says this
	}{
		{name: "some-and-full", some: 8351234, full: 8123456, hasFull: true,
			data: "some avg10=14.70 avg60=3.10 avg300=0.70 total=8351234\nfull avg10=14.70 avg60=3.10 avg300=0.70 total=8123456\n"},
		{name: "some-only-before-5.13", data: psiSome + "0\n"},
		{name: "full-first", data: psiFull + "4\n" + psiSome + "5\n", some: 5, full: 4, hasFull: true},
		{name: "max-values", data: "some avg10=100.00 avg60=100.00 avg300=100.00 total=18446744073709551615\n",
			some: 1<<64 - 1},
		// total= is found by name; a newer field beside the averages is checked for shape only
		{name: "total-first-and-a-new-field", data: "some total=7 avg10=0.00 avg1200=1.25 count=3\n", some: 7},

		{name: "cut", data: psiSome + "5\n" + psiFull + "12", line: 2, quote: "total=12", reason: "newline"},
		{name: "empty", data: "", line: 1, reason: "no 'some' line"},
		{name: "full-only", data: psiFull + "4\n", line: 1, quote: "full avg10", reason: "no 'some' line"},
		{name: "empty-line", data: psiSome + "5\n\n", line: 2, reason: "expected 'some|full"},
		{name: "no-total", data: "some avg10=0.00 avg60=0.00 avg300=0.00\n", line: 1, reason: "total=N"},
		{name: "negative", data: psiSome + "-1\n", line: 1, quote: "total=-1", reason: "unsigned decimal"},
		{name: "total-over-u64", data: psiSome + "18446744073709551616\n", line: 1, reason: "unsigned decimal"},
		{name: "total-leading-zero", data: psiSome + "05\n", line: 1, reason: "unsigned decimal"},
		{name: "total-empty", data: psiSome + "\n", line: 1, reason: "unsigned decimal"},
		{name: "two-totals", data: "some total=1 total=2\n", line: 1, reason: "a second total="},
		{name: "two-some-lines", data: psiSome + "1\n" + psiSome + "2\n", line: 2, reason: "a second 'some'"},
		{name: "two-full-lines", data: psiSome + "1\n" + psiFull + "2\n" + psiFull + "3\n", line: 3, reason: "a second 'full'"},
		{name: "foreign-line", data: psiSome + "1\nother avg10=0.00 total=1\n", line: 2, quote: "other", reason: "'some' or 'full'"},
		{name: "avg-one-decimal", data: "some avg10=0.0 avg60=0.00 avg300=0.00 total=1\n", line: 1, reason: "key=N.NN"},
		{name: "avg-comma", data: "some avg10=0,00 avg60=0.00 avg300=0.00 total=1\n", line: 1, reason: "key=N.NN"},
		{name: "avg-negative", data: "some avg10=-1.00 total=1\n", line: 1, reason: "key=N.NN"},
		{name: "avg-empty", data: "some avg10= total=1\n", line: 1, reason: "key=N.NN"},
		{name: "no-fields", data: "some\n", line: 1, reason: "expected 'some|full"},
		{name: "only-a-space", data: "some \n", line: 1, reason: "key=value fields after"},
		{name: "two-spaces", data: "some avg10=0.00  total=1\n", line: 1, reason: "single spaces"},
		{name: "tab", data: "some\tavg10=0.00 total=1\n", line: 1, reason: "'some' or 'full'"},
		{name: "trailing-space", data: "some total=1 \n", line: 1, reason: "a space at the end"},
		{name: "crlf", data: "some total=1\r\n", line: 1, reason: "unsigned decimal"},
		{name: "upper-case-key", data: "some AVG10=0.00 total=1\n", line: 1, reason: "key=value"},
		{name: "no-key", data: "some =0.00 total=1\n", line: 1, reason: "key=value"},
		{name: "cpu-stat-in-its-place", data: "usage_usec 3012345\nnr_periods 61\n", line: 1, reason: "key=value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Stat{Usage: 9, PSISome: 99, HasPSI: true, HasPSIFull: true, LocalThrottled: 3, HasLocal: true}
			err := ParsePressure("/c/cpu.pressure", []byte(c.data), &s)
			if c.line > 0 {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("want a *FormatError, got %v", err)
				}
				msg := err.Error()
				if fe.Path != "/c/cpu.pressure" || fe.Line != c.line || !strings.Contains(fe.Text, c.quote) ||
					!strings.Contains(msg, c.reason) {
					t.Fatalf("error %q (line %d), want line %d quoting %q and saying %q", msg, fe.Line, c.line, c.quote, c.reason)
				}
				if s.HasPSI || s.HasPSIFull {
					t.Errorf("a failed parse left %+v", s)
				}
				return
			}
			want := Stat{Usage: 9, PSISome: c.some, PSIFull: c.full, HasPSI: true, HasPSIFull: c.hasFull,
				LocalThrottled: 3, HasLocal: true}
			if err != nil || s != want {
				t.Fatalf("got %+v, %v; want %+v", s, err, want)
			}
		})
	}
	data := []byte(psiSome + "5\n" + psiFull + "4\n")
	var s Stat
	if n := testing.AllocsPerRun(100, func() { _ = ParsePressure("p", data, &s) }); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}

func TestParseStatLocal(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       uint64
		line       int
		reason     string
	}{
		{name: "6.6", data: "throttled_usec 64123\n", want: 64123},
		{name: "a-later-key", data: "throttled_usec 5\nnr_throttled 2\n", want: 5},
		{name: "zero", data: "throttled_usec 0\n", want: 0},
		{name: "no-throttled-usec", data: "other 1\n", line: 1, reason: "no throttled_usec"},
		{name: "empty", data: "", line: 1, reason: "no throttled_usec"},
		{name: "cut", data: "throttled_usec 64", line: 1, reason: "newline"},
		{name: "negative", data: "throttled_usec -1\n", line: 1, reason: "unsigned decimal"},
		{name: "pressure-in-its-place", data: psiSome + "5\n", line: 1, reason: "'key value'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Stat{Usage: 9, PSISome: 4, HasPSI: true, LocalThrottled: 77, HasLocal: true}
			err := ParseStatLocal("/c/cpu.stat.local", []byte(c.data), &s)
			if c.line > 0 {
				var fe *FormatError
				if !errors.As(err, &fe) || fe.Line != c.line || !strings.Contains(err.Error(), c.reason) {
					t.Fatalf("error %v, want a *FormatError at line %d saying %q", err, c.line, c.reason)
				}
				if s.HasLocal {
					t.Errorf("a failed parse left %+v", s)
				}
				return
			}
			want := Stat{Usage: 9, PSISome: 4, HasPSI: true, LocalThrottled: c.want, HasLocal: true}
			if err != nil || s != want {
				t.Fatalf("got %+v, %v; want %+v", s, err, want)
			}
		})
	}
	var s Stat
	data := []byte("throttled_usec 64123\n")
	if n := testing.AllocsPerRun(100, func() { _ = ParseStatLocal("l", data, &s) }); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}

// ParseStat leaves the v2 signals of a Stat alone: they come from other files.
func TestParseStatKeepsPressure(t *testing.T) {
	s := Stat{PSISome: 7, LocalThrottled: 9}
	if err := ParseStat("cpu.stat", []byte("usage_usec 1\nnice_usec 3\n"), 2, &s); err != nil {
		t.Fatal(err)
	}
	if s.PSISome != 7 || s.LocalThrottled != 9 || s.Usage != 1 {
		t.Fatalf("got %+v", s)
	}
}

// TestSignalsNotOnV1: a v1 cgroup's reader opens neither file, even where one exists.
func TestSignalsNotOnV1(t *testing.T) {
	dir := copyCase(t, "v1", "set")
	rewrite(t, filepath.Join(dir, "cpu.pressure"), psiSome+"5\n")
	c := &Cgroup{Version: 1, StatPath: filepath.Join(dir, "cpu.stat"), UsagePath: filepath.Join(dir, "cpuacct.usage")}
	r, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var s Stat
	if err := r.Read(&s); err != nil || r.HasPSI() || r.PressurePath() != "" || s.HasPSI {
		t.Fatalf("v1: %+v %v, has cpu.pressure %v", s, err, r.HasPSI())
	}
}

// TestPSIDisabled: with PSI off (psi=0) a kernel that still shows cpu.pressure answers its
// reads with EOPNOTSUPP; Open leaves it out as if absent. Another failed first read is an
// error naming the file.
func TestPSIDisabled(t *testing.T) {
	dir := copyCase(t, "v2", "signals")
	c := &Cgroup{Version: 2, StatPath: filepath.Join(dir, "cpu.stat")}
	pressure := filepath.Join(dir, "cpu.pressure")
	for _, c2 := range []struct {
		errno   unix.Errno
		wantErr bool
		probed  string // the files Open read once
	}{{unix.EOPNOTSUPP, false, "cpu.pressure,cpu.stat.local"}, {unix.EIO, true, "cpu.pressure"}} {
		var probed []string
		probeRead = func(fd int, p []byte, off int64) (int, error) {
			name, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			probed = append(probed, filepath.Base(name))
			if name == pressure {
				return 0, c2.errno
			}
			return unix.Pread(fd, p, off)
		}
		r, err := c.Open()
		probeRead = unix.Pread
		if strings.Join(probed, ",") != c2.probed {
			t.Errorf("%v: probed %v", c2.errno, probed)
		}
		if c2.wantErr {
			var ge *GoneError
			if !errors.As(err, &ge) || ge.Path != pressure || !errors.Is(err, unix.EIO) {
				t.Errorf("%v: error %v (%T), want a *GoneError naming cpu.pressure", c2.errno, err, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var s Stat
		err = r.Read(&s)
		if err != nil || r.HasPSI() || !r.HasLocal() || s.HasPSI || s.HasPSIFull || !s.HasLocal || s.LocalThrottled != 2702113 {
			t.Errorf("%v: %+v %v", c2.errno, s, err)
		}
		r.Close()
	}
}

// TestSignalsRewritten: the held descriptors see every rewrite (the kernel regenerates the
// text at each read); content the kernel does not write is a *FormatError naming the file,
// a file that no longer reads a *GoneError.
func TestSignalsRewritten(t *testing.T) {
	dir := copyCase(t, "v2", "signals")
	c := &Cgroup{Version: 2, StatPath: filepath.Join(dir, "cpu.stat")}
	r, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.PressurePath() != filepath.Join(dir, "cpu.pressure") || r.LocalPath() != filepath.Join(dir, "cpu.stat.local") {
		t.Fatalf("paths %q %q", r.PressurePath(), r.LocalPath())
	}
	var s Stat
	rewrite(t, filepath.Join(dir, "cpu.pressure"), psiSome+"2204999\n"+psiFull+"2188000\n")
	rewrite(t, filepath.Join(dir, "cpu.stat.local"), "throttled_usec 2800000\n")
	if err := r.Read(&s); err != nil || s.PSISome != 2204999 || s.PSIFull != 2188000 || s.LocalThrottled != 2800000 {
		t.Fatalf("after rewrite: %+v %v", s, err)
	}
	raw, local, err := r.ReadRawSignals()
	if err != nil || string(raw) != psiSome+"2204999\n"+psiFull+"2188000\n" || string(local) != "throttled_usec 2800000\n" {
		t.Fatalf("raw %q %q %v", raw, local, err)
	}
	rewrite(t, filepath.Join(dir, "cpu.stat.local"), strings.Repeat("9", 2000))
	var fe *FormatError
	if err := r.Read(&s); !errors.As(err, &fe) || fe.Path != r.LocalPath() || !strings.Contains(err.Error(), "read buffer") {
		t.Fatalf("2000 digits: %v", err)
	}
	rewrite(t, filepath.Join(dir, "cpu.stat.local"), "throttled_usec 1\n")
	r.pressure.f.Close() // a removed cgroup answers with ENODEV; a closed descriptor fails the same way
	var ge *GoneError
	if err := r.Read(&s); !errors.As(err, &ge) || ge.Path != r.PressurePath() {
		t.Fatalf("closed cpu.pressure: %v (%T)", err, err)
	}
	r.pressure.f = nil
	r.pressure.fd = -1
}

// TestEmptyStatLocalIsNone: cpu.stat.local is a core file (6.6+) that the kernel leaves
// empty in a cgroup whose cpu controller is not enabled (cgroup_local_stat_show finds no
// cpu css; its cpu.stat then holds only the usage keys): no cpu.stat.local, as before 6.6,
// not a cpu.stat.local without its throttled_usec line.
func TestEmptyStatLocalIsNone(t *testing.T) {
	dir := copyCase(t, "v2", "signals")
	rewrite(t, filepath.Join(dir, "cpu.stat"), "usage_usec 39401699023\nuser_usec 33999426286\nsystem_usec 5402272737\nnice_usec 604665911\n")
	rewrite(t, filepath.Join(dir, "cpu.stat.local"), "")
	c := &Cgroup{Version: 2, StatPath: filepath.Join(dir, "cpu.stat")}
	r, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var s Stat
	if err := r.Read(&s); err != nil || r.HasLocal() || s.HasLocal || s.Usage != 39401699023 {
		t.Fatalf("%+v %v (local %v)", s, err, r.HasLocal())
	}
}
