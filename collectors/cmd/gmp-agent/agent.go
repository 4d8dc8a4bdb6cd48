package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/cgroup"
)

// level is one watched cgroup of a container: its own, or its pod's.
type level struct {
	name string // container, pod
	spec string // the sampler's --cgroup argument
	r    *cgroup.Reader
	h    history
	v    verdict
	// the last read, for the metrics; with metrics on, the bandwidth limits beside it
	last    cgroup.Stat
	hasLast bool
	lim     *cgroup.LimitsReader
	limits  cgroup.Limits
	limOK   bool
}

// watched is one container under watch.
type watched struct {
	spec      spec
	static    bool // from --watch-cgroup
	levels    []*level
	firing    bool   // the trigger held at the last read (events are sent on changes only)
	skipWhy   string // the kind of limit that last held a capture back
	capturing bool
}

func (w *watched) close() {
	for _, l := range w.levels {
		l.r.Close()
		if l.lim != nil {
			l.lim.Close()
		}
	}
}

// workload names the container's workload for the rate limits: a Deployment's pods carry
// <deployment>-<pod-template-hash> as their ReplicaSet, other controllers their own name;
// a bare pod is its own workload.
func (w *watched) workload() string {
	s := w.spec
	name := s.Pod
	if o := s.Owner; o != nil {
		name = o.Name
		if o.Kind == "ReplicaSet" && o.TemplateHash != "" {
			name = strings.TrimSuffix(name, "-"+o.TemplateHash)
		}
	}
	return s.Namespace + "/" + name + "/" + s.Container
}

type agent struct {
	cfg     *config
	ev      *events
	mount   cgroup.Mount
	api     *apiClient
	targets map[string]*watched
	done    chan captureResult
	running int
	// captures started in the last hour (node budget) and the last per workload
	recent   []time.Duration
	lastByWl map[string]time.Duration
	told     map[string]bool // unwatchable containers already reported
	// the spool's size, and when it was last walked
	spoolBytes int64
	spoolAt    time.Duration
	reads      uint64
	metrics    *metrics // nil without --metrics-addr
}

func newAgent(cfg *config, ev *events) (*agent, error) {
	m, err := cgroup.Detect(cfg.root)
	if err != nil {
		return nil, err
	}
	a := &agent{cfg: cfg, ev: ev, mount: m, targets: map[string]*watched{}, done: make(chan captureResult, 16),
		lastByWl: map[string]time.Duration{}, told: map[string]bool{}}
	if cfg.metricsAddr != "" {
		a.metrics = newMetrics()
	}
	if cfg.api != "" {
		if a.api, err = newAPIClient(cfg.api, cfg.node, cfg.tokenFile, cfg.caFile); err != nil {
			return nil, err
		}
	}
	for _, w := range cfg.watch {
		name, sp, ok := strings.Cut(w, "=")
		if !ok || name == "" || sp == "" {
			return nil, fmt.Errorf("--watch-cgroup %q: expected NAME=SPEC", w)
		}
		t := &watched{spec: spec{Pod: name, Container: name}, static: true}
		l, err := a.open("container", sp)
		if err != nil {
			return nil, fmt.Errorf("--watch-cgroup %q: %w", w, err)
		}
		t.levels = []*level{l}
		a.targets["static/"+name] = t
	}
	return a, nil
}

func (a *agent) open(name, sp string) (*level, error) {
	t, err := a.mount.Resolve(sp)
	if err != nil {
		return nil, err
	}
	r, err := t.Open()
	if err != nil {
		return nil, err
	}
	l := &level{name: name, spec: sp, r: r, h: history{max: a.historyLen()}}
	if a.metrics != nil {
		// the quota and period for the metrics (a missing file is the kernel's default)
		if l.lim, err = t.OpenLimits(); err != nil {
			r.Close()
			return nil, err
		}
	}
	return l, nil
}

// historyLen keeps a minute and a half of reads (the frozen rate looks back a minute) and
// at least enough for the trigger's periods at one period per read.
func (a *agent) historyLen() int {
	n := int(90*time.Second/a.cfg.watchEvery) + 2
	if p := a.cfg.trig.periods + 2; p > n {
		n = p
	}
	return n
}

func (a *agent) run(ctx context.Context) error {
	started := map[string]any{"node": a.cfg.node, "cgroup_version": a.mount.Version,
		"watch_every_ns": a.cfg.watchEvery.Nanoseconds(), "static": len(a.targets)}
	if a.metrics != nil {
		addr, stop, err := a.serveMetrics(a.cfg.metricsAddr)
		if err != nil {
			return err
		}
		defer stop()
		started["metrics_addr"] = addr.String()
	}
	a.ev.emit("started", started)
	a.recoverSpool()
	if a.api != nil {
		a.refresh(ctx)
	}
	watchT := time.NewTicker(a.cfg.watchEvery)
	defer watchT.Stop()
	var listC <-chan time.Time
	if a.api != nil {
		listT := time.NewTicker(a.cfg.listEvery)
		defer listT.Stop()
		listC = listT.C
	}
	a.tick(ctx)
	for {
		select {
		case <-ctx.Done():
			// captures see the same context: their samplers are stopped and their bundles
			// finished before the agent exits
			for a.running > 0 {
				a.finish(<-a.done)
			}
			a.ev.emit("stopped", map[string]any{"watched": len(a.targets), "reads": a.reads})
			for _, t := range a.targets {
				t.close()
			}
			return nil
		case <-listC:
			a.refresh(ctx)
		case <-watchT.C:
			a.tick(ctx)
		case r := <-a.done:
			a.finish(r)
		}
		a.publishMetrics()
	}
}

// refresh lists the node's pods and brings the watched set in line: new containers are
// opened, containers gone (or restarted: a new ID is a new cgroup) are closed.
func (a *agent) refresh(ctx context.Context) {
	specs, err := a.api.list(ctx)
	if err != nil {
		if ctx.Err() == nil {
			a.ev.emit("error", map[string]any{"error": err.Error()})
		}
		return
	}
	seen := map[string]bool{}
	for _, s := range specs {
		k := s.key()
		seen[k] = true
		if t, ok := a.targets[k]; ok {
			if !t.capturing {
				t.spec = s // deletion, annotations may change; a capture holds its own copy
				a.openPod(t, k)
			}
			continue
		}
		t := &watched{spec: s}
		cspec := fmt.Sprintf("kube-container:%s:%s:%s", s.UID, s.QoS, s.ContainerID)
		l, err := a.open("container", cspec)
		if err != nil {
			// the API may list a container an instant before its cgroup exists (or after
			// it is gone): tried again at the next listing, told once
			if !a.told[k] {
				a.ev.emit("unwatchable", map[string]any{"pod": s.Pod, "namespace": s.Namespace,
					"container": s.Container, "error": err.Error()})
				a.told[k] = true
			}
			continue
		}
		t.levels = append(t.levels, l)
		a.openPod(t, k)
		a.targets[k] = t
		a.ev.emit("watch", map[string]any{"pod": s.Pod, "namespace": s.Namespace, "container": s.Container,
			"cpu_limit": s.CPULimit, "pprof_port": s.PprofPort, "cgroup": l.r.Rel})
	}
	for k, t := range a.targets {
		if !t.static && !seen[k] && !t.capturing {
			t.close()
			delete(a.targets, k)
		}
	}
	for k := range a.told {
		if !seen[k] {
			delete(a.told, k)
		}
	}
}

// openPod adds the pod level to a container watched without it (its cgroup may appear
// after the container's, or have failed to open once); told once.
func (a *agent) openPod(t *watched, k string) {
	if len(t.levels) != 1 {
		return
	}
	s := t.spec
	pl, err := a.open("pod", fmt.Sprintf("kube-pod:%s:%s", s.UID, s.QoS))
	if err != nil {
		if !a.told["pod/"+k] {
			a.ev.emit("unwatchable", map[string]any{"pod": s.Pod, "namespace": s.Namespace, "level": "pod",
				"error": err.Error()})
			a.told["pod/"+k] = true
		}
		return
	}
	t.levels = append(t.levels, pl)
}

// tick reads every watched level once and applies the trigger.
func (a *agent) tick(ctx context.Context) {
	now := monoNow()
	var firing []*watched
	for k, t := range a.targets {
		if t.capturing {
			// its sampler reads it 1000 times a second meanwhile; the metrics go on
			if a.metrics != nil {
				for _, l := range t.levels {
					a.readLevel(l)
				}
			}
			continue
		}
		ok := true
		fire := false
		for _, l := range t.levels {
			s, err := a.readLevel(l)
			if err != nil {
				ok = false
				if !errors.Is(err, fs.ErrNotExist) && !isGone(err) {
					a.ev.emit("error", map[string]any{"pod": t.spec.Pod, "container": t.spec.Container,
						"cgroup": l.r.Rel, "error": err.Error()})
				}
				break
			}
			a.reads++
			thr := s.ThrottledTime
			if s.NsUnits {
				thr /= 1000
			}
			l.h.add(point{t: now, periods: s.Periods, throttled: s.Throttled, frozenUs: thr})
			l.v = a.cfg.trig.judge(&l.h)
			// the pod level's throttling fires one container of the pod only (its primary):
			// the others would each spend the node's budget on the same freeze
			fire = fire || (l.v.Fire && (l.name == "container" || t.spec.Primary || t.static))
		}
		if !ok {
			// the cgroup went away (container ended or restarted): the next listing
			// finds its successor, if any
			if !t.static {
				t.close()
				delete(a.targets, k)
			}
			continue
		}
		if fire && !t.firing {
			if a.metrics != nil {
				a.metrics.triggers.Inc()
			}
			a.ev.emit("trigger", map[string]any{"pod": t.spec.Pod, "namespace": t.spec.Namespace,
				"container": t.spec.Container, "levels": t.verdicts()})
		}
		t.firing = fire
		if fire {
			firing = append(firing, t)
		} else {
			t.skipWhy = "" // a new episode's refusal is told again
		}
	}
	// the most throttled first, when the budget allows only some
	sort.Slice(firing, func(i, j int) bool { return firing[i].worst() > firing[j].worst() })
	for _, t := range firing {
		if kind, why := a.allowed(t, now); kind != "" {
			if kind != t.skipWhy { // told once per kind of refusal, not every second
				if a.metrics != nil {
					a.metrics.refused(kind)
				}
				a.ev.emit("skip", map[string]any{"pod": t.spec.Pod, "namespace": t.spec.Namespace,
					"container": t.spec.Container, "kind": kind, "reason": why})
			}
			t.skipWhy = kind
			continue
		}
		t.skipWhy = ""
		a.start(ctx, t, now)
	}
}

// readLevel reads a level's cpu.stat (and, with metrics on, its limits) and keeps the read
// for the metrics.
func (a *agent) readLevel(l *level) (cgroup.Stat, error) {
	var s cgroup.Stat
	if err := l.r.Read(&s); err != nil {
		return s, err
	}
	l.last, l.hasLast = s, true
	if l.lim != nil {
		// a limit that does not read (gone with its cgroup, or not a value the kernel
		// writes) leaves the quota out of the metrics until it reads again
		l.limOK = l.lim.Read(&l.limits) == nil
	}
	return s, nil
}

func isGone(err error) bool {
	var g *cgroup.GoneError
	return errors.As(err, &g)
}

func (t *watched) verdicts() map[string]verdict {
	m := map[string]verdict{}
	for _, l := range t.levels {
		m[l.name] = l.v
	}
	return m
}

func (t *watched) worst() float64 {
	w := -1.0
	for _, l := range t.levels {
		if l.v.Share > w {
			w = l.v.Share
		}
	}
	return w
}

// allowed applies the rate limits: ("", "") when a capture may start, else the kind of
// refusal and its details.
func (a *agent) allowed(t *watched, now time.Duration) (kind, why string) {
	if a.cfg.perHour == 0 {
		return "watch only", "--max-per-hour 0: the agent only watches"
	}
	if a.running >= a.cfg.maxConcurrent {
		return "busy", fmt.Sprintf("%d capture(s) running (--max-concurrent)", a.running)
	}
	kept := a.recent[:0]
	for _, s := range a.recent {
		if now-s < time.Hour {
			kept = append(kept, s)
		}
	}
	a.recent = kept
	if len(a.recent) >= a.cfg.perHour {
		return "node budget", fmt.Sprintf("node budget: %d captures in the last hour (--max-per-hour)", len(a.recent))
	}
	if last, ok := a.lastByWl[t.workload()]; ok && now-last < a.cfg.cooldown {
		return "workload cooldown", fmt.Sprintf("workload %s captured %v ago (--workload-cooldown %v)",
			t.workload(), (now - last).Round(time.Second), a.cfg.cooldown)
	}
	if a.cfg.maxSpool > 0 {
		// walked at most every 10 s (a full spool would otherwise be walked every second
		// for every firing container)
		if a.spoolAt == 0 || now-a.spoolAt > 10*time.Second {
			a.spoolBytes, a.spoolAt = dirBytes(a.cfg.out), now
		}
		if used := a.spoolBytes; used >= a.cfg.maxSpool {
			return "spool full", fmt.Sprintf("%s holds %d MiB (--max-spool-bytes %d MiB): move bundles to the store "+
				"with `gmpanalysis store put --move`", a.cfg.out, used>>20, a.cfg.maxSpool>>20)
		}
	}
	return "", ""
}

func (a *agent) start(ctx context.Context, t *watched, now time.Duration) {
	a.running++
	a.recent = append(a.recent, now)
	a.lastByWl[t.workload()] = now
	t.capturing = true
	c := newCapture(a.cfg, t, t.workload())
	os.MkdirAll(a.cfg.out, 0o755)
	a.logCapture(t.workload(), time.Now())
	a.ev.emit("capture_start", map[string]any{"pod": t.spec.Pod, "namespace": t.spec.Namespace,
		"container": t.spec.Container, "workload": t.workload(), "bundle": c.final, "levels": t.verdicts()})
	go func() { a.done <- c.run(ctx) }()
}

func (a *agent) finish(r captureResult) {
	a.running--
	r.target.capturing = false
	// no reads while the capture ran (its sampler read instead): the trigger starts again
	// from what follows, not from a span with a 20 s gap and the captured episode in it
	for _, l := range r.target.levels {
		l.h.pts = l.h.pts[:0]
	}
	r.target.firing = false
	facts := map[string]any{"pod": r.target.spec.Pod, "namespace": r.target.spec.Namespace,
		"container": r.target.spec.Container, "bundle": r.dir, "complete": r.complete}
	if a.metrics != nil {
		outcome := "incomplete"
		if r.complete {
			outcome = "complete"
		}
		a.metrics.captures.WithLabelValues(outcome).Inc()
	}
	if r.err != "" {
		facts["error"] = r.err
	}
	a.ev.emit("capture", facts)
}
