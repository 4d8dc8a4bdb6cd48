package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

const csvHeader = "t_ns,read_ns,usage_us,nr_periods,nr_throttled,throttled_us,nr_bursts,burst_us"

// openOutput opens --out ("-": stdout) for appending. A header only for a new file:
// appending to an existing file continues its rows.
func openOutput(path string, multi bool) (*os.File, error) {
	w := os.Stdout
	if path != "-" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("cannot open output: %w", err)
		}
		w = f
	}
	if st, err := w.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		hdr := csvHeader
		if multi {
			hdr += ",cgroup"
		}
		if _, err := w.WriteString(hdr + "\n"); err != nil {
			if w != os.Stdout {
				w.Close()
			}
			return nil, fmt.Errorf("write: %w", err)
		}
	}
	return w, nil
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
