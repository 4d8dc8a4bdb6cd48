package main

import (
	"fmt"
	"io"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

// target is one cgroup to sample, with its counter files held open. Where the files are,
// whether the cgroup exists and how they parse is internal/cgroup's business.
type target struct {
	name string // label for the optional `cgroup` column
	*cgroup.Reader
	lim *limitsState // nil unless --limits-out

	signals     bool    // it has cpu.pressure or cpu.stat.local (v2), read after cpu.stat
	reads       uint64  // successful reads in the loop (rows)
	first, last rawRead // the bytes of the first and the last of them, for the summary
}

// rawRead is a copy of one read's bytes (cpu.stat; cpu.pressure and cpu.stat.local where
// the target has them), in buffers allocated at open that hold any read the reader accepts,
// so the loop keeps it without allocating; the summary parses it at the end.
type rawRead struct {
	stat, pressure, local []byte
}

func newRawRead() rawRead {
	return rawRead{make([]byte, 0, cgroup.StatBufSize), make([]byte, 0, cgroup.SideBufSize), make([]byte, 0, cgroup.SideBufSize)}
}

// set copies a read's bytes into k.
func (k *rawRead) set(stat, pressure, local []byte) {
	k.stat = append(k.stat[:0], stat...)
	k.pressure = append(k.pressure[:0], pressure...)
	k.local = append(k.local[:0], local...)
}

// close closes the target's files.
func (t *target) close() {
	t.Reader.Close()
	if t.lim != nil {
		t.lim.r.Close()
	}
}

// openTargets opens the --cgroup specs under the cgroup mount at root, telling log about
// each as it is opened; with limits, their limit files too.
func openTargets(log io.Writer, root string, specs []string, limits bool) ([]*target, error) {
	mount, err := cgroup.Detect(root)
	if err != nil {
		return nil, err
	}
	targets := make([]*target, 0, len(specs))
	for _, spec := range specs {
		t, err := openTarget(mount, spec, limits)
		if err != nil {
			for _, o := range targets {
				o.close()
			}
			return nil, err
		}
		targets = append(targets, t)
		fmt.Fprintf(log, "gmp-sampler: sampling %s at %s (cgroup v%d)\n", t.name, t.Rel, t.Version)
	}
	return targets, nil
}

// openTarget resolves --cgroup spec under the mount m, refuses a cgroup that contains the
// sampler, opens the counter files (and with limits the limit files) and reads them once,
// so a tree whose files do not parse is refused before the first row.
func openTarget(m cgroup.Mount, spec string, limits bool) (*target, error) {
	t, err := m.Resolve(spec)
	if err != nil {
		return nil, err
	}
	if err := checkOutside(t.Cgroup); err != nil {
		return nil, err
	}
	r, err := t.Open()
	if err != nil {
		return nil, fmt.Errorf("cgroup %q: %w", spec, err)
	}
	var s cgroup.Stat
	if err := r.Read(&s); err != nil {
		r.Close()
		return nil, fmt.Errorf("cgroup %q: %w", spec, err)
	}
	tg := &target{name: t.Name, Reader: r, signals: r.HasPSI() || r.HasLocal(), first: newRawRead(), last: newRawRead()}
	if limits {
		lr, err := t.OpenLimits()
		if err == nil {
			var l cgroup.Limits
			if err = lr.Read(&l); err != nil {
				lr.Close()
			}
		}
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("cgroup %q: %w", spec, err)
		}
		tg.lim = newLimitsState(lr, t.Name)
	}
	return tg, nil
}

// checkOutside refuses to sample a cgroup that contains the sampler: once the group
// exhausts its quota every thread in it, the sampler's included, is frozen until the next
// period, so the samples that matter most would never be taken.
func checkOutside(c *cgroup.Cgroup) error {
	self := cgroup.SelfPath(c.Version)
	if cgroup.Contains(c.Rel, self) {
		return fmt.Errorf("the sampler runs inside cgroup %q (its own cgroup is %s): it would be "+
			"throttled with its target; run it from the root cpu cgroup", c.Rel, self)
	}
	return nil
}
