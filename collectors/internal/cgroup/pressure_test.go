package cgroup

import (
	"errors"
	"testing"
)

func TestParsePressure(t *testing.T) {
	cases := []struct {
		name       string
		data       string
		some, full uint64
		hasFull    bool
		bad        bool
	}{
		{"some-and-full", "some avg10=14.70 avg60=3.10 avg300=0.70 total=8351234\nfull avg10=14.70 avg60=3.10 avg300=0.70 total=8123456\n", 8351234, 8123456, true, false},
		{"some-only-before-5.13", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", 0, 0, false, false},
		{"cut", "some avg10=0.00 avg60=0.00 avg300=0.00 total=12", 0, 0, false, true},
		{"no-total", "some avg10=0.00 avg60=0.00 avg300=0.00\n", 0, 0, false, true},
		{"negative", "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n", 0, 0, false, true},
		{"foreign-line", "other avg10=0.00 total=1\n", 0, 0, false, true},
		{"empty", "", 0, 0, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s Stat
			err := ParsePressure("cpu.pressure", []byte(c.data), &s)
			if c.bad {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("want a *FormatError, got %v", err)
				}
				return
			}
			if err != nil || s.PSISome != c.some || s.PSIFull != c.full || s.HasPSIFull != c.hasFull {
				t.Fatalf("got %+v, %v", s, err)
			}
		})
	}
	data := []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=4\n")
	var s Stat
	if n := testing.AllocsPerRun(100, func() { _ = ParsePressure("p", data, &s) }); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}

func TestParseStatLocal(t *testing.T) {
	var s Stat
	if err := ParseStatLocal("cpu.stat.local", []byte("throttled_usec 64123\n"), &s); err != nil || s.LocalThrottled != 64123 {
		t.Fatalf("got %d, %v", s.LocalThrottled, err)
	}
	var fe *FormatError
	if err := ParseStatLocal("cpu.stat.local", []byte("other 1\n"), &s); !errors.As(err, &fe) {
		t.Fatalf("no throttled_usec: want a *FormatError, got %v", err)
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
