package main

import (
	"bytes"
	"strconv"
)

// counters are the bandwidth counters of one read, as the kernel wrote them.
type counters struct {
	usage, periods, throttled, throttledTime, bursts, burstTime uint64
	// nsUnits: v1 reports usage (cpuacct.usage), throttled_time and burst_time in ns.
	nsUnits bool
}

// parseUint reads the leading decimal digits of b.
func parseUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + uint64(c-'0')
	}
	return v
}

// parseStat parses "key value\n" lines by key; keys it does not know are skipped, so newer
// kernels that add keys (nr_bursts, cpu.stat.local, ...) keep working.
func parseStat(stat []byte, c *counters) {
	for len(stat) > 0 {
		line := stat
		if i := bytes.IndexByte(stat, '\n'); i >= 0 {
			line, stat = stat[:i], stat[i+1:]
		} else {
			stat = nil
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		key, val := line[:sp], parseUint(line[sp+1:])
		switch string(key) { // no allocation: the compiler special-cases this conversion
		case "usage_usec":
			c.usage = val
		case "nr_periods":
			c.periods = val
		case "nr_throttled":
			c.throttled = val
		case "throttled_usec", "throttled_time":
			c.throttledTime = val
		case "nr_bursts":
			c.bursts = val
		case "burst_usec", "burst_time":
			c.burstTime = val
		}
	}
}

// appendUs writes v (in µs, or in ns when ns is true) as µs: ns become an exact decimal
// with three fractional digits, so no precision is lost in the unit change.
func appendUs(b []byte, v uint64, ns bool) []byte {
	if !ns {
		return strconv.AppendUint(b, v, 10)
	}
	b = strconv.AppendUint(b, v/1000, 10)
	frac := v % 1000
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b
}

func appendRow(row []byte, t *target, tNs, readNs int64, stat, usage []byte, multi bool) []byte {
	c := counters{nsUnits: t.version == 1}
	parseStat(stat, &c)
	if t.version == 1 {
		c.usage = parseUint(usage)
	}
	row = strconv.AppendInt(row, tNs, 10)
	row = append(row, ',')
	row = strconv.AppendInt(row, readNs, 10)
	row = append(row, ',')
	row = appendUs(row, c.usage, c.nsUnits)
	row = append(row, ',')
	row = strconv.AppendUint(row, c.periods, 10)
	row = append(row, ',')
	row = strconv.AppendUint(row, c.throttled, 10)
	row = append(row, ',')
	row = appendUs(row, c.throttledTime, c.nsUnits)
	row = append(row, ',')
	row = strconv.AppendUint(row, c.bursts, 10)
	row = append(row, ',')
	row = appendUs(row, c.burstTime, c.nsUnits)
	if multi {
		row = append(row, ',')
		row = append(row, t.name...)
	}
	return append(row, '\n')
}
