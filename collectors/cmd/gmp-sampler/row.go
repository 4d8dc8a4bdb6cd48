package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/bundle"
	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

const csvHeader = "t_ns,read_ns,usage_us,nr_periods,nr_throttled,throttled_us,nr_bursts,burst_us"

// signalsHeader: cgroup v2's own signals, after burst_us, when a target has cpu.pressure or
// cpu.stat.local (a target without one of them writes an empty field there, never 0).
const signalsHeader = ",psi_some_us,psi_full_us,local_throttled_us"

// columns is the shape of one output's rows: the optional columns it has.
type columns struct {
	signals bool // psi_some_us,psi_full_us,local_throttled_us after burst_us
	cgroup  bool // the target's name, last
}

func (c columns) header() string {
	h := csvHeader
	if c.signals {
		h += signalsHeader
	}
	if c.cgroup {
		h += ",cgroup"
	}
	return h
}

// wantColumns is the shape of a new output's rows for these targets: the v2 signals when
// one of them has cpu.pressure or cpu.stat.local, the name when there are several.
func wantColumns(targets []*target) columns {
	c := columns{cgroup: len(targets) > 1}
	for _, t := range targets {
		c.signals = c.signals || t.HasPSI() || t.HasLocal()
	}
	return c
}

// openOutput opens --out ("-": stdout) for appending, and says which columns its rows
// have. A new file (or stdout, a pipe) gets the header of want. An existing file keeps
// the columns of its header, read back: the v2 signals only if it has them (empty fields
// where this run's targets lack the files), the cgroup column if it has one (rows of one
// target then carry its name); a file whose header is not one this sampler writes, or has
// no cgroup column for the rows of several targets, is refused rather than given rows of
// another shape. A last line a killed sampler cut is cut off first (bundle.DropCutLine).
func openOutput(path string, want columns) (*os.File, columns, error) {
	if path == "-" {
		return writeHeader(os.Stdout, want)
	}
	if _, err := bundle.DropCutLine(path, allHeaders()...); err != nil {
		return nil, columns{}, fmt.Errorf("cannot append to output: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, columns{}, fmt.Errorf("cannot open output: %w", err)
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return writeHeader(f, want)
	}
	have, err := existingColumns(path, want)
	if err != nil {
		f.Close()
		return nil, columns{}, err
	}
	return f, have, nil
}

// allHeaders are the headers of every shape of rows this sampler writes.
func allHeaders() []string {
	var out []string
	for _, c := range []columns{{}, {signals: true}, {cgroup: true}, {signals: true, cgroup: true}} {
		out = append(out, c.header()+"\n")
	}
	return out
}

// writeHeader writes the header of c to w.
func writeHeader(w *os.File, c columns) (*os.File, columns, error) {
	if _, err := w.WriteString(c.header() + "\n"); err != nil {
		if w != os.Stdout {
			w.Close()
		}
		return nil, columns{}, fmt.Errorf("write: %w", err)
	}
	return w, c, nil
}

// existingColumns reads the header line of the non-empty file at path: the columns its
// rows have.
func existingColumns(path string, want columns) (columns, error) {
	f, err := os.Open(path)
	if err != nil {
		return columns{}, fmt.Errorf("cannot read the header of output %s (appending keeps its columns): %w", path, err)
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	for _, c := range []columns{{}, {signals: true}, {cgroup: true}, {signals: true, cgroup: true}} {
		if line != c.header() {
			continue
		}
		if want.cgroup && !c.cgroup {
			return columns{}, fmt.Errorf("output %s has no cgroup column (header %q): rows of several cgroups cannot be "+
				"appended to it; name a new file", path, line)
		}
		return c, nil
	}
	return columns{}, fmt.Errorf("output %s does not begin with a header this sampler writes (%q, want %q): "+
		"rows appended to it would not match its columns; name a new file", path, line, want.header())
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

// appendRow writes one CSV row of the bundle's cpu_stat.csv (units normalised to µs) in
// the shape cols: the v2 signals (cgroup v2's own, always µs) where c has them, an empty
// field where the target has no such file; then the target's name.
func appendRow(row []byte, name string, tNs, readNs int64, c *cgroup.Stat, cols columns) []byte {
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
	if cols.signals {
		row = append(row, ',')
		if c.HasPSI {
			row = strconv.AppendUint(row, c.PSISome, 10)
		}
		row = append(row, ',')
		if c.HasPSIFull {
			row = strconv.AppendUint(row, c.PSIFull, 10)
		}
		row = append(row, ',')
		if c.HasLocal {
			row = strconv.AppendUint(row, c.LocalThrottled, 10)
		}
	}
	if cols.cgroup {
		row = append(row, ',')
		row = append(row, csvField(name)...) // a --cgroup name may hold a comma or a quote
	}
	return append(row, '\n')
}
