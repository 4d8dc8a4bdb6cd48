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
}

// openTargets opens the --cgroup specs under the cgroup mount at root, telling log about
// each as it is opened.
func openTargets(log io.Writer, root string, specs []string) ([]*target, error) {
	mount, err := cgroup.Detect(root)
	if err != nil {
		return nil, err
	}
	targets := make([]*target, 0, len(specs))
	for _, spec := range specs {
		t, err := openTarget(mount, spec)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
		fmt.Fprintf(log, "gmp-sampler: sampling %s at %s (cgroup v%d)\n", t.name, t.Rel, t.Version)
	}
	return targets, nil
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
