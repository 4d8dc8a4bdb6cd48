// Package cgroup is the one reader of the cgroup CPU interface files: which cgroup
// version holds the cpu controller under a mount, where a cgroup's files are (v1 cpu and
// cpuacct hierarchies, v2 unified; the kubelet's cgroupfs and systemd layouts), the one
// rule for "this cgroup exists", and the parsers of cpu.stat, cpuacct.usage, cpu.max,
// cpu.cfs_quota_us, cpu.cfs_period_us, the burst files and cgroup v2's own signals,
// cpu.pressure (PSI) and cpu.stat.local.
//
// Every parser takes the file's path (for its messages) and its bytes, so tests point it
// at fixture trees that mirror /sys/fs/cgroup (tests/data/cgroup, shared with the Python
// tests). Malformed content is a *FormatError naming the file and quoting the line: a
// value is never read as 0 because it could not be parsed. A missing limit file means
// "no limit" (the kernel's defaults), not an error.
//
// Units as the kernel writes them: v1 cpu.stat throttled_time and burst_time and
// cpuacct.usage are ns; v2 cpu.stat, cpu.stat.local and cpu.pressure's totals are µs;
// every limit file is µs.
package cgroup

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// FormatError is a cgroup file whose content does not have the shape the kernel writes.
type FormatError struct {
	Path   string // the file
	Line   int    // 1-based
	Text   string // the offending line, without its newline
	Reason string // what was expected
}

// maxQuote bounds how much of a line an error message quotes, in bytes of the quote as
// written (a 5000-digit "number", 64 bytes that each print as \xNN).
const maxQuote = 64

// hint is what to do about content the kernel never writes: the path is not a cgroup's.
const hint = "not what the kernel writes: check that the directory is a cgroup's"

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s line %d: %s, got %s (%s)", e.Path, e.Line, e.Reason, quote(e.Text), hint)
}

// quote puts the start of s in double quotes for a message, the way gmpanalysis/cgroup.py
// does: bytes that are not UTF-8 as \xNN, characters that do not print (controls, bidi
// overrides: a hostile file must not rewrite the terminal) as \xNN, \uNNNN or
// \UNNNNNNNN, the rest as is; at most maxQuote bytes of that, then "... (N bytes)".
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	rest := s
	for len(rest) > 0 {
		r, n := utf8.DecodeRuneInString(rest)
		var unit string
		switch {
		case r == utf8.RuneError && n == 1:
			unit = fmt.Sprintf("\\x%02x", rest[0])
		case unicode.IsPrint(r):
			unit = rest[:n]
		case r < 0x100:
			unit = fmt.Sprintf("\\x%02x", r)
		case r < 0x10000:
			unit = fmt.Sprintf("\\u%04x", r)
		default:
			unit = fmt.Sprintf("\\U%08x", r)
		}
		if b.Len()-1+len(unit) > maxQuote {
			break
		}
		b.WriteString(unit)
		rest = rest[n:]
	}
	b.WriteByte('"')
	if len(rest) > 0 {
		fmt.Fprintf(&b, "... (%d bytes)", len(s))
	}
	return b.String()
}

func formatError(path string, line int, text []byte, reason string) error {
	return &FormatError{Path: path, Line: line, Text: string(text), Reason: reason}
}

// maxUint64Digits: 18446744073709551615 has 20 digits.
const maxUint64Digits = 20

// parseUint parses an unsigned decimal as the kernel prints it (%llu): ASCII digits only
// (not the other Unicode digits), at least one, no sign, no spaces, no leading zero, no
// overflow. It never allocates.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > maxUint64Digits || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseInt parses a signed decimal as the kernel prints it (%lld: "-" then digits, never
// "-0") into an int64.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := parseUint(b)
	if !ok || u > 1<<63 || (!neg && u == 1<<63) || (neg && u == 0) {
		return 0, false
	}
	if neg {
		return -int64(u), true
	}
	return int64(u), true
}

// singleLine returns the one line of a one-value file (its newline optional), or a
// FormatError for an empty file or a second line.
func singleLine(path string, data []byte) ([]byte, error) {
	line := data
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		line = data[:i]
		if rest := data[i+1:]; len(rest) > 0 {
			return nil, formatError(path, 2, firstLine(rest), "expected one line")
		}
	}
	if len(line) == 0 {
		return nil, formatError(path, 1, line, "expected a value, the file is empty")
	}
	return line, nil
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

// ParseUsage parses cpuacct.usage (v1, ns). It never allocates unless it fails.
func ParseUsage(path string, data []byte) (uint64, error) {
	line, err := singleLine(path, data)
	if err != nil {
		return 0, err
	}
	v, ok := parseUint(line)
	if !ok {
		return 0, formatError(path, 1, line, "expected an unsigned decimal integer (ns)")
	}
	return v, nil
}

// Stat holds the bandwidth counters of one cpu.stat read, in the kernel's units.
type Stat struct {
	Usage         uint64 // v2 usage_usec (µs); v1: filled from cpuacct.usage (ns) by the caller
	Periods       uint64 // nr_periods
	Throttled     uint64 // nr_throttled
	ThrottledTime uint64 // v2 throttled_usec (µs), v1 throttled_time (ns)
	Bursts        uint64 // nr_bursts (5.16+; 0 before)
	BurstTime     uint64 // v2 burst_usec (µs), v1 burst_time (ns)
	NsUnits       bool   // v1: Usage, ThrottledTime and BurstTime are ns

	// cgroup v2's own signals, in µs, from the files beside cpu.stat (ParsePressure,
	// ParseStatLocal; Reader.Parse fills them at every read, ParseStat leaves them alone).
	// The Has flags say which were read: false where the cgroup has no such file (v1, a
	// kernel before 6.6 for cpu.stat.local, before 5.13 for the full line, PSI off).
	PSISome        uint64 // cpu.pressure "some" total=: wall time some task of the group stalled for CPU
	PSIFull        uint64 // cpu.pressure "full" total=: wall time every task of it stalled (throttling included)
	LocalThrottled uint64 // cpu.stat.local throttled_usec: its own run queues throttled, by its own quota or an ancestor's, summed over CPUs
	HasPSI         bool   // PSISome was read
	HasPSIFull     bool   // PSIFull was read (cpu.pressure had its full line)
	HasLocal       bool   // LocalThrottled was read
}

// eachRawLine calls fn(lineno, line) for every line of a kernel text file, without its
// newline. Every line must end with its newline: the kernel writes one, so a missing one
// means a cut read, even when the cut fell between two digits. fn's error stops the walk.
func eachRawLine(path string, data []byte, fn func(lineno int, line []byte) error) error {
	lineno := 0
	for len(data) > 0 {
		lineno++
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return formatError(path, lineno, data, "line without its newline: the read was cut")
		}
		if err := fn(lineno, data[:i]); err != nil {
			return err
		}
		data = data[i+1:]
	}
	return nil
}

// eachLine calls fn(key, value) for every "key value\n" line of a keyed file (cpu.stat
// and friends).
func eachLine(path string, data []byte, fn func(key []byte, v uint64)) error {
	return eachRawLine(path, data, func(lineno int, line []byte) error {
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 || !isKey(line[:sp]) {
			return formatError(path, lineno, line, "expected 'key value' (key: a-z, 0-9, '_', '.')")
		}
		v, ok := parseUint(line[sp+1:])
		if !ok && intCounter(line[:sp]) {
			v, ok = parseInt32Counter(line[sp+1:])
		}
		if !ok {
			return formatError(path, lineno, line, "expected 'key value' with an unsigned decimal value")
		}
		fn(line[:sp], v)
		return nil
	})
}

// intCounter: the counters the kernel keeps in an int of struct cfs_bandwidth and prints
// with %d (cpu.stat of v1 and v2). Past 2^31 periods (6.8 years of 100 ms periods, 24.8 days
// of 1 ms ones) they print negative.
func intCounter(key []byte) bool {
	switch string(key) {
	case "nr_periods", "nr_throttled", "nr_bursts":
		return true
	}
	return false
}

// parseInt32Counter reads a negative %d of an int counter as the 32-bit count it is
// (-2147483648 is 2^31): it goes on rising to 2^32, then starts again from 0, which the
// analysis takes as a reset.
func parseInt32Counter(b []byte) (uint64, bool) {
	x, ok := parseInt(b)
	if !ok || x >= 0 || x < math.MinInt32 {
		return 0, false
	}
	return uint64(uint32(int32(x))), true
}

// isKey: the kernel's keyed files name their fields in lower-case ASCII, digits, '_' and
// '.' (core_sched.force_idle_usec); anything else is not a key it wrote.
func isKey(k []byte) bool {
	for _, c := range k {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// ParseStat parses cpu.stat into s by key. Keys it does not know are skipped (the full
// parser, ParseKeyed, keeps them), so newer kernels keep working; bandwidth keys an
// older kernel or a v2 group without the cpu controller lacks read as 0. The one key the
// kernel always writes (v1 nr_periods, v2 usage_usec) must be there: an empty or foreign
// file is an error, not a row of zeros. It never allocates unless it fails: the sampler
// calls it at every read.
func ParseStat(path string, data []byte, version int, s *Stat) error {
	s.Usage, s.Periods, s.Throttled, s.ThrottledTime, s.Bursts, s.BurstTime = 0, 0, 0, 0, 0, 0
	s.NsUnits = version == 1
	sawRequired := false
	err := eachLine(path, data, func(key []byte, v uint64) {
		switch string(key) { // no allocation: the compiler special-cases this conversion
		case "usage_usec":
			if version == 2 {
				s.Usage, sawRequired = v, true
			}
		case "nr_periods":
			s.Periods = v
			sawRequired = sawRequired || version == 1
		case "nr_throttled":
			s.Throttled = v
		case "throttled_usec", "throttled_time":
			s.ThrottledTime = v
		case "nr_bursts":
			s.Bursts = v
		case "burst_usec", "burst_time":
			s.BurstTime = v
		}
	})
	if err != nil {
		return err
	}
	if !sawRequired {
		if version == 1 {
			return formatError(path, 1, firstLine(data), "no nr_periods line (every v1 cpu.stat has one)")
		}
		return formatError(path, 1, firstLine(data), "no usage_usec line (every v2 cpu.stat has one)")
	}
	return nil
}

// Field is one "key value" line of a keyed file.
type Field struct {
	Key   string
	Value uint64
}

// ParseKeyed parses every "key value" line of cpu.stat (or cpu.stat.local), in order,
// unknown keys included.
func ParseKeyed(path string, data []byte) ([]Field, error) {
	var out []Field
	err := eachLine(path, data, func(key []byte, v uint64) {
		out = append(out, Field{string(key), v})
	})
	return out, err
}
