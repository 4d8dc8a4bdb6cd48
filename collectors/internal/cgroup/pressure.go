package cgroup

import "bytes"

// ParsePressure parses a cgroup's cpu.pressure (PSI, cgroup v2), which the kernel writes as
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=12345
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=6789
//
// with total= the cumulative stall time in µs of wall time. Each line is taken by its
// first word ("some" or "full", each at most once) and its total= field; the other fields
// are checked for their shape only (key=N or key=N.NN, as the kernel prints the averages).
// The "some" line must be there; "full" may not be (kernels before 5.13 write none for
// cpu). Every line must end with its newline: a missing one means a cut read.
//
// It fills s.PSISome, s.PSIFull, s.HasPSIFull and sets s.HasPSI, and leaves the rest of s
// alone; on an error HasPSI is false. It never allocates unless it fails: the sampler calls
// it at every read.
func ParsePressure(path string, data []byte, s *Stat) error {
	s.PSISome, s.PSIFull, s.HasPSI, s.HasPSIFull = 0, 0, false, false
	sawSome, sawFull := false, false
	var some, full uint64
	err := eachRawLine(path, data, func(lineno int, line []byte) error {
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 {
			return formatError(path, lineno, line, "expected 'some|full avg10=N.NN avg60=N.NN avg300=N.NN total=N'")
		}
		total, hasTotal, reason := psiFields(line[sp+1:])
		if reason != "" {
			return formatError(path, lineno, line, reason)
		}
		if !hasTotal {
			return formatError(path, lineno, line, "expected a total=N field (µs)")
		}
		switch string(line[:sp]) { // no allocation: the compiler special-cases this conversion
		case "some":
			if sawSome {
				return formatError(path, lineno, line, "a second 'some' line")
			}
			some, sawSome = total, true
		case "full":
			if sawFull {
				return formatError(path, lineno, line, "a second 'full' line")
			}
			full, sawFull = total, true
		default:
			return formatError(path, lineno, line, "expected a 'some' or 'full' line")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !sawSome {
		return formatError(path, 1, firstLine(data), "no 'some' line (every cpu.pressure has one)")
	}
	s.PSISome, s.PSIFull, s.HasPSI, s.HasPSIFull = some, full, true, sawFull
	return nil
}

// psiFields checks the fields after a PSI line's first word: one or more "key=value"
// separated by single spaces, each value an unsigned decimal as the kernel prints it,
// whole (total=%llu) or with two decimals (avg10=%lu.%02lu). It returns total='s value,
// whether there was one, and why the fields do not have that shape ("" if they do).
func psiFields(b []byte) (total uint64, hasTotal bool, reason string) {
	if len(b) == 0 {
		return 0, false, "expected key=value fields after the first word"
	}
	for len(b) > 0 {
		f := b
		if i := bytes.IndexByte(b, ' '); i >= 0 {
			f, b = b[:i], b[i+1:]
			if len(b) == 0 {
				return 0, false, "a space at the end of the line"
			}
		} else {
			b = nil
		}
		eq := bytes.IndexByte(f, '=')
		if eq <= 0 || !isKey(f[:eq]) {
			return 0, false, "expected key=value fields separated by single spaces (key: a-z, 0-9, '_', '.')"
		}
		v := f[eq+1:]
		if string(f[:eq]) == "total" {
			n, ok := parseUint(v)
			if !ok {
				return 0, false, "expected total=N with an unsigned decimal value (µs)"
			}
			if hasTotal {
				return 0, false, "a second total= field"
			}
			total, hasTotal = n, true
			continue
		}
		if !psiValue(v) {
			return 0, false, "expected key=N or key=N.NN (unsigned decimals)"
		}
	}
	return total, hasTotal, ""
}

// psiValue: an unsigned decimal as %llu prints it, or as %lu.%02lu (the averages).
func psiValue(v []byte) bool {
	if d := bytes.IndexByte(v, '.'); d >= 0 {
		frac := v[d+1:]
		if len(frac) != 2 || frac[0] < '0' || frac[0] > '9' || frac[1] < '0' || frac[1] > '9' {
			return false
		}
		v = v[:d]
	}
	_, ok := parseUint(v)
	return ok
}

// ParseStatLocal parses cpu.stat.local (6.6+, cgroup v2), keyed like cpu.stat, into
// s.LocalThrottled: its throttled_usec, the time the cgroup's own run queues stood
// throttled, by its own quota or an ancestor's, summed over CPUs (µs). It sets s.HasLocal
// and leaves the rest of s alone; on an error HasLocal is false. Other keys are skipped
// (ParseKeyed keeps them); throttled_usec must be there. It never allocates unless it
// fails.
func ParseStatLocal(path string, data []byte, s *Stat) error {
	s.LocalThrottled, s.HasLocal = 0, false
	var thr uint64
	saw := false
	err := eachLine(path, data, func(key []byte, v uint64) {
		if string(key) == "throttled_usec" {
			thr, saw = v, true
		}
	})
	if err != nil {
		return err
	}
	if !saw {
		return formatError(path, 1, firstLine(data), "no throttled_usec line (every cpu.stat.local has one)")
	}
	s.LocalThrottled, s.HasLocal = thr, true
	return nil
}
