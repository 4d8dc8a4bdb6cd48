package main

import (
	"strconv"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

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

// appendRow writes one CSV row of the bundle's cpu_stat.csv (units normalised to µs).
func appendRow(row []byte, name string, tNs, readNs int64, c *cgroup.Stat, multi bool) []byte {
	row = strconv.AppendInt(row, tNs, 10)
	row = append(row, ',')
	row = strconv.AppendInt(row, readNs, 10)
	row = append(row, ',')
	row = appendUs(row, c.Usage, c.NsUnits)
	row = append(row, ',')
	row = strconv.AppendUint(row, c.Periods, 10)
	row = append(row, ',')
	row = strconv.AppendUint(row, c.Throttled, 10)
	row = append(row, ',')
	row = appendUs(row, c.ThrottledTime, c.NsUnits)
	row = append(row, ',')
	row = strconv.AppendUint(row, c.Bursts, 10)
	row = append(row, ',')
	row = appendUs(row, c.BurstTime, c.NsUnits)
	if multi {
		row = append(row, ',')
		row = append(row, name...)
	}
	return append(row, '\n')
}
