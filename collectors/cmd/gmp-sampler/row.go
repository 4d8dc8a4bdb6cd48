package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

const csvHeader = "t_ns,read_ns,usage_us,nr_periods,nr_throttled,throttled_us,nr_bursts,burst_us"

// v2Header: cgroup v2's own signals, after burst_us, where a target has cpu.pressure or
// cpu.stat.local (a target without one writes an empty field there, never 0)
const v2Header = ",psi_some_us,psi_full_us,local_throttled_us"

// openOutput opens --out ("-": stdout) for appending. A header only for a new file:
// appending to an existing file continues its rows, with the v2 columns only if its
// header has them (v2 reports whether rows carry them).
func openOutput(path string, multi, v2 bool) (*os.File, bool, error) {
	w, err := openOutputFile(path, multi, v2)
	if err != nil {
		return nil, false, err
	}
	if w != os.Stdout {
		if st, err := w.Stat(); err == nil && st.Size() > 0 {
			head := make([]byte, len(csvHeader)+len(v2Header))
			n, _ := w.ReadAt(head, 0)
			v2 = n == len(head) && string(head) == csvHeader+v2Header
		}
	}
	return w, v2, nil
}

func openOutputFile(path string, multi, v2 bool) (*os.File, error) {
	w := os.Stdout
	if path != "-" {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("cannot open output: %w", err)
		}
		w = f
	}
	if st, err := w.Stat(); err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		hdr := csvHeader
		if v2 {
			hdr += v2Header
		}
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
	return appendRowV2(row, name, tNs, readNs, c, multi, nil)
}

// v2Cols says which of the v2 signals a target has (nil: the file has no such columns).
type v2Cols struct{ psi, local bool }

// appendRowV2 is appendRow with the v2 columns when v is not nil.
func appendRowV2(row []byte, name string, tNs, readNs int64, c *cgroup.Stat, multi bool, v *v2Cols) []byte {
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
	if v != nil {
		row = append(row, ',')
		if v.psi {
			row = strconv.AppendUint(row, c.PSISome, 10)
		}
		row = append(row, ',')
		if v.psi && c.HasPSIFull {
			row = strconv.AppendUint(row, c.PSIFull, 10)
		}
		row = append(row, ',')
		if v.local {
			row = strconv.AppendUint(row, c.LocalThrottled, 10)
		}
	}
	if multi {
		row = append(row, ',')
		row = append(row, name...)
	}
	return append(row, '\n')
}
