package cgroup

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The fuzz targets hold every parser to the same contract on any bytes: no panic; a
// success is a value within the kernel's ranges whose canonical text (as the kernel prints
// it) is exactly the input, so nothing the kernel would not write is ever accepted; a
// failure is a *FormatError naming the file and a line of the input, whose message stays
// short and printable whatever the bytes were. Seeds: testdata/fuzz/<target>/, made from
// the fixture files of tests/data/cgroup.

const fuzzPath = "/sys/fs/cgroup/x/f"

// checkFormatError: err is a *FormatError about fuzzPath at a line the input has, and its
// message is bounded and printable (it quotes hostile bytes escaped).
func checkFormatError(t *testing.T, data []byte, err error) {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("%q: error %v is a %T, want *FormatError", data, err, err)
	}
	lines := bytes.Count(data, []byte("\n")) + 1
	if fe.Path != fuzzPath || fe.Line < 1 || fe.Line > lines {
		t.Fatalf("%q: error at %s line %d (the input has %d lines)", data, fe.Path, fe.Line, lines)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, fuzzPath+" line "+strconv.Itoa(fe.Line)+": ") {
		t.Fatalf("%q: message %q does not start with the file and line", data, msg)
	}
	if len(msg) > 400 {
		t.Fatalf("%q: message of %d bytes", data, len(msg))
	}
	if !utf8.ValidString(msg) {
		t.Fatalf("%q: message %q is not UTF-8", data, msg)
	}
	for _, r := range msg {
		if !unicode.IsPrint(r) {
			t.Fatalf("%q: message %q holds the unprintable %U", data, msg, r)
		}
	}
}

// canonical: data is exactly text, with or without the one newline the kernel ends it with.
func canonical(data []byte, text string) bool {
	return string(data) == text || string(data) == text+"\n"
}

func FuzzParsePeriodV1(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParsePeriodV1(fuzzPath, data)
		if err != nil {
			checkFormatError(t, data, err)
			return
		}
		if v < MinPeriodUs || v > MaxPeriodUs || !canonical(data, strconv.FormatUint(v, 10)) {
			t.Fatalf("%q accepted as %d", data, v)
		}
	})
}

func FuzzParseQuotaV1(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseQuotaV1(fuzzPath, data)
		if err != nil {
			checkFormatError(t, data, err)
			return
		}
		if (v != NoQuota && (v < MinQuotaUs || v > MaxQuotaUs)) || !canonical(data, strconv.FormatInt(v, 10)) {
			t.Fatalf("%q accepted as %d", data, v)
		}
	})
}

func FuzzParseBurst(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseBurst(fuzzPath, data)
		if err != nil {
			checkFormatError(t, data, err)
			return
		}
		if v > MaxBurstNoQuotaUs || !canonical(data, strconv.FormatUint(v, 10)) {
			t.Fatalf("%q accepted as %d", data, v)
		}
		// against a quota: accepted only within the kernel's rules
		for _, q := range []int64{NoQuota, MinQuotaUs, 50_000, MaxQuotaUs} {
			err := CheckBurst(fuzzPath, data, v, q)
			ok := q == NoQuota || (v <= uint64(q) && v+uint64(q) <= MaxQuotaUs)
			if (err == nil) != ok {
				t.Fatalf("burst %d, quota %d: %v", v, q, err)
			}
		}
	})
}

func FuzzParseCPUMax(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		q, p, err := ParseCPUMax(fuzzPath, data)
		if err != nil {
			checkFormatError(t, data, err)
			return
		}
		text := "max"
		if q != NoQuota {
			if q < MinQuotaUs || q > MaxQuotaUs {
				t.Fatalf("%q: quota %d", data, q)
			}
			text = strconv.FormatInt(q, 10)
		}
		if p < MinPeriodUs || p > MaxPeriodUs || !canonical(data, text+" "+strconv.FormatUint(p, 10)) {
			t.Fatalf("%q accepted as %d %d", data, q, p)
		}
	})
}

func FuzzParseUsage(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseUsage(fuzzPath, data)
		if err != nil {
			checkFormatError(t, data, err)
			return
		}
		if !canonical(data, strconv.FormatUint(v, 10)) {
			t.Fatalf("%q accepted as %d", data, v)
		}
	})
}

// FuzzParseStat checks ParseStat and ParseKeyed against each other and against a plain
// reading of "key value\n" lines: the same keys, values and counters, or both refuse.
func FuzzParseStat(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, v2 bool) {
		version := 1
		if v2 {
			version = 2
		}
		var s Stat
		err := ParseStat(fuzzPath, data, version, &s)
		fields, kerr := ParseKeyed(fuzzPath, data)
		if kerr != nil {
			checkFormatError(t, data, kerr)
			if err == nil {
				t.Fatalf("%q: ParseKeyed refused (%v), ParseStat accepted", data, kerr)
			}
			checkFormatError(t, data, err)
			return
		}
		// every field printed back is the input
		var back strings.Builder
		want := Stat{NsUnits: version == 1}
		required := false
		lines := strings.Split(string(data), "\n")
		for i, fl := range fields {
			text := strconv.FormatUint(fl.Value, 10)
			if strings.HasPrefix(lines[i], fl.Key+" -") { // an int counter printed with %d, past 2^31
				text = strconv.FormatInt(int64(int32(uint32(fl.Value))), 10)
			}
			back.WriteString(fl.Key + " " + text + "\n")
			switch {
			case fl.Key == "usage_usec" && version == 2:
				want.Usage, required = fl.Value, true
			case fl.Key == "nr_periods":
				want.Periods = fl.Value
				required = required || version == 1
			case fl.Key == "nr_throttled":
				want.Throttled = fl.Value
			case fl.Key == "throttled_usec" || fl.Key == "throttled_time":
				want.ThrottledTime = fl.Value
			case fl.Key == "nr_bursts":
				want.Bursts = fl.Value
			case fl.Key == "burst_usec" || fl.Key == "burst_time":
				want.BurstTime = fl.Value
			}
		}
		if back.String() != string(data) {
			t.Fatalf("%q read as %q", data, back.String())
		}
		if !required {
			if err == nil {
				t.Fatalf("%q accepted without its required key", data)
			}
			checkFormatError(t, data, err)
			return
		}
		if err != nil || s != want {
			t.Fatalf("%q: %+v %v, want %+v", data, s, err, want)
		}
	})
}

// addFixtureSeeds adds every fixture file of this name under tests/data/cgroup/v2 as a seed.
func addFixtureSeeds(f *testing.F, name string) {
	paths, _ := filepath.Glob(filepath.Join(dataDir, "v2", "*", name))
	if len(paths) == 0 {
		f.Fatalf("no fixture %s under %s", name, dataDir)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// psiLine is a plain reading of one cpu.pressure line as the kernel prints it: a first
// word, then key=value fields separated by single spaces, each value %llu or %lu.%02lu, one
// of them total=%llu. ok is false for anything else.
func psiLine(line string) (word string, total uint64, ok bool) {
	word, rest, found := strings.Cut(line, " ")
	if !found || rest == "" {
		return "", 0, false
	}
	totals := 0
	for _, f := range strings.Split(rest, " ") {
		key, v, found := strings.Cut(f, "=")
		if !found || key == "" || strings.Trim(key, "abcdefghijklmnopqrstuvwxyz0123456789_.") != "" {
			return "", 0, false
		}
		whole, frac, dotted := strings.Cut(v, ".")
		n, err := strconv.ParseUint(whole, 10, 64)
		if err != nil || strconv.FormatUint(n, 10) != whole {
			return "", 0, false
		}
		if key == "total" {
			if dotted {
				return "", 0, false
			}
			total, totals = n, totals+1
		} else if dotted && (len(frac) != 2 || strings.Trim(frac, "0123456789") != "") {
			return "", 0, false
		}
	}
	return word, total, totals == 1
}

// FuzzParsePressure checks ParsePressure against psiLine: the same totals, or both refuse.
func FuzzParsePressure(f *testing.F) {
	addFixtureSeeds(f, "cpu.pressure")
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Stat
		err := ParsePressure(fuzzPath, data, &s)
		var want Stat
		ok := len(data) > 0 && data[len(data)-1] == '\n'
		if ok {
			for _, line := range strings.Split(string(data[:len(data)-1]), "\n") {
				word, total, lok := psiLine(line)
				switch {
				case !lok:
					ok = false
				case word == "some" && !want.HasPSI:
					want.PSISome, want.HasPSI = total, true
				case word == "full" && !want.HasPSIFull:
					want.PSIFull, want.HasPSIFull = total, true
				default: // another word, or a second some or full line
					ok = false
				}
			}
		}
		if !ok || !want.HasPSI {
			if err == nil {
				t.Fatalf("%q accepted as %+v", data, s)
			}
			checkFormatError(t, data, err)
			if s.HasPSI || s.HasPSIFull {
				t.Fatalf("%q refused, but left %+v", data, s)
			}
			return
		}
		if err != nil || s != want {
			t.Fatalf("%q: %+v %v, want %+v", data, s, err, want)
		}
	})
}

// FuzzParseStatLocal checks ParseStatLocal against ParseKeyed: throttled_usec's value, or
// both refuse, or no such key.
func FuzzParseStatLocal(f *testing.F) {
	addFixtureSeeds(f, "cpu.stat.local")
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Stat
		err := ParseStatLocal(fuzzPath, data, &s)
		fields, kerr := ParseKeyed(fuzzPath, data)
		var want Stat
		for _, fl := range fields {
			if fl.Key == "throttled_usec" {
				want.LocalThrottled, want.HasLocal = fl.Value, true
			}
		}
		if kerr != nil || !want.HasLocal {
			if err == nil {
				t.Fatalf("%q accepted as %+v (ParseKeyed: %v)", data, s, kerr)
			}
			checkFormatError(t, data, err)
			return
		}
		if err != nil || s != want {
			t.Fatalf("%q: %+v %v, want %+v", data, s, err, want)
		}
	})
}
