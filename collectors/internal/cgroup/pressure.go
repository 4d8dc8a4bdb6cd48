package cgroup

import "bytes"

// ParsePressure parses a cgroup's cpu.pressure (PSI, cgroup v2): a "some" line and, from
// 5.13, a "full" line, each "some avg10=0.00 avg60=0.00 avg300=0.00 total=N" with N the
// cumulative stall time in µs. It fills s.PSISome and s.PSIFull (HasPSIFull: the kernel
// wrote the full line). It never allocates unless it fails: the sampler calls it at every
// read.
func ParsePressure(path string, data []byte, s *Stat) error {
	lineno := 0
	sawSome := false
	s.HasPSIFull = false
	for len(data) > 0 {
		lineno++
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return formatError(path, lineno, data, "line without its newline: the read was cut")
		}
		line := data[:i]
		data = data[i+1:]
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 {
			return formatError(path, lineno, line, "expected 'some|full avg10=... total=N'")
		}
		t := bytes.LastIndex(line, []byte(" total="))
		if t < 0 {
			return formatError(path, lineno, line, "expected a total=N field (µs)")
		}
		v, ok := parseUint(line[t+len(" total="):])
		if !ok {
			return formatError(path, lineno, line, "expected total= with an unsigned decimal value (µs)")
		}
		switch string(line[:sp]) {
		case "some":
			s.PSISome, sawSome = v, true
		case "full":
			s.PSIFull, s.HasPSIFull = v, true
		default:
			return formatError(path, lineno, line, "expected a 'some' or 'full' line")
		}
	}
	if !sawSome {
		return formatError(path, 1, firstLine(data), "no 'some' line (every cpu.pressure has one)")
	}
	return nil
}

// ParseStatLocal parses cpu.stat.local (6.6+, cgroup v2) into s.LocalThrottled: its
// throttled_usec, the time the cgroup's own run queues stood throttled by its own quota or
// an ancestor's, summed over CPUs. Other keys are skipped. It never allocates unless it fails.
func ParseStatLocal(path string, data []byte, s *Stat) error {
	saw := false
	err := eachLine(path, data, func(key []byte, v uint64) {
		if string(key) == "throttled_usec" {
			s.LocalThrottled, saw = v, true
		}
	})
	if err != nil {
		return err
	}
	if !saw {
		return formatError(path, 1, firstLine(data), "no throttled_usec line (every cpu.stat.local has one)")
	}
	return nil
}
