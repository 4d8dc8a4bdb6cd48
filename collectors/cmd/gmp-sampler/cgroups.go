package main

import (
	"fmt"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

// target is one cgroup to sample, with its counter files held open. Where the files are,
// whether the cgroup exists and how they parse is internal/cgroup's business.
type target struct {
	name string // label for the optional `cgroup` column
	*cgroup.Reader
}

// openTarget resolves --cgroup spec under the mount m, refuses a cgroup that contains the
// sampler, opens the counter files and reads them once, so a tree whose files do not parse
// is refused before the first row.
func openTarget(m cgroup.Mount, spec string) (*target, error) {
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
	return &target{name: t.Name, Reader: r}, nil
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
