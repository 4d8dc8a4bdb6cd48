package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prometheus metrics of the agent (--metrics-addr, served on /metrics).
//
// Per watched container and cgroup level (labels namespace, pod, container, level; the pod
// level has container=""), the counters of the cpu.stat the agent reads every --watch-every
// and the bandwidth limits beside it, as the kernel holds them at that read:
//
//	gmp_cfs_periods_total            counter  nr_periods
//	gmp_cfs_throttled_periods_total  counter  nr_throttled
//	gmp_cfs_throttled_seconds_total  counter  throttled time (frozen CPU-seconds, summed over CPUs)
//	gmp_cpu_usage_seconds_total      counter  usage (v2 usage_usec, v1 cpuacct.usage)
//	gmp_cfs_quota_seconds            gauge    quota per period (absent without a quota)
//	gmp_cfs_period_seconds           gauge    the period
//
// per container (namespace, pod, container): gmp_gomaxprocs, the GOMAXPROCS its environment
// sets where that is a number; and for the node: gmp_watched_containers,
// gmp_triggers_total, gmp_captures_in_progress, gmp_captures_total{outcome},
// gmp_capture_refusals_total{reason}, and the process and Go runtime collectors (the
// agent's own CPU and memory).
//
// The per-container series are a snapshot of the watched set, rebuilt at every read: a
// container that goes away (its pod deleted, or restarted: a new cgroup) leaves the
// scrape at the next one. So a node exports at most 6 series per limited container, 6 per
// pod with a limit and 1 per container whose GOMAXPROCS is set, plus a fixed set
// (collectors/deploy/README.md).

// Metric names (also in testdata/metrics.txt, which the dashboard's queries are checked against).
const (
	mPeriods      = "gmp_cfs_periods_total"
	mThrottled    = "gmp_cfs_throttled_periods_total"
	mThrottledSec = "gmp_cfs_throttled_seconds_total"
	mUsageSec     = "gmp_cpu_usage_seconds_total"
	mQuota        = "gmp_cfs_quota_seconds"
	mPeriod       = "gmp_cfs_period_seconds"
	mGomaxprocs   = "gmp_gomaxprocs"
)

// help is the HELP text of the per-container series.
var help = map[string]string{
	mPeriods:   "CFS bandwidth periods in which the cgroup ran (cpu.stat nr_periods).",
	mThrottled: "CFS periods that ended with the cgroup throttled by its quota (cpu.stat nr_throttled).",
	mThrottledSec: "CPU time the cgroup's run queues stood frozen by its quota, summed over CPUs " +
		"(cpu.stat throttled_usec; v1 throttled_time).",
	mUsageSec: "CPU time the cgroup used (cpu.stat usage_usec; v1 cpuacct.usage).",
	mQuota:    "CPU time the cgroup may use per CFS period (cpu.max; v1 cpu.cfs_quota_us); absent without a quota.",
	mPeriod:   "Length of the cgroup's CFS period (cpu.max; v1 cpu.cfs_period_us).",
	mGomaxprocs: "GOMAXPROCS the container's environment sets (a literal value, or the downward API's " +
		"limits.cpu rounded up); absent where it is unset or not a number.",
}

func desc(name string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help[name], labels, nil)
}

// refusalReasons are the kinds of refusal allowed() gives, as label values.
var refusalReasons = map[string]string{
	"watch only":        "watch_only",
	"busy":              "busy",
	"node budget":       "node_budget",
	"workload cooldown": "workload_cooldown",
	"spool full":        "spool_full",
}

// levelSample is one level's last read.
type levelSample struct {
	ns, pod, container, level string
	periods, throttled        uint64
	throttledSec, usageSec    float64
	quotaSec, periodSec       float64 // quotaSec < 0: no quota; both 0: limits not read
	hasLimits                 bool
	stale                     bool // its container is being captured (dedup prefers a fresh one)
}

type gomaxSample struct {
	ns, pod, container string
	procs              float64
}

// metrics is the agent's registry. The agent's goroutine publishes the per-container
// snapshot (publish); scrapes read it under the lock.
type metrics struct {
	reg *prometheus.Registry

	mu      sync.Mutex
	levels  []levelSample
	gomax   []gomaxSample
	watched int

	periods, throttled, throttledSec, usageSec, quota, period, gomaxprocs, watchedD *prometheus.Desc

	triggers prometheus.Counter
	running  prometheus.Gauge
	captures *prometheus.CounterVec
	refusals *prometheus.CounterVec
}

func newMetrics() *metrics {
	lv := []string{"namespace", "pod", "container", "level"}
	ct := []string{"namespace", "pod", "container"}
	m := &metrics{
		reg:          prometheus.NewRegistry(),
		periods:      desc(mPeriods, lv),
		throttled:    desc(mThrottled, lv),
		throttledSec: desc(mThrottledSec, lv),
		usageSec:     desc(mUsageSec, lv),
		quota:        desc(mQuota, lv),
		period:       desc(mPeriod, lv),
		gomaxprocs:   desc(mGomaxprocs, ct),
		watchedD: prometheus.NewDesc("gmp_watched_containers",
			"Containers with a CPU limit the agent watches on its node.", nil, nil),
		triggers: prometheus.NewCounter(prometheus.CounterOpts{Name: "gmp_triggers_total",
			Help: "Times a watched container crossed the trigger (a throttling episode began)."}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gmp_captures_in_progress",
			Help: "Captures running now."}),
		captures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gmp_captures_total",
			Help: "Captures finished, by outcome: complete, or incomplete (the bundle is flagged and says why)."},
			[]string{"outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gmp_capture_refusals_total",
			Help: "Captures a trigger asked for and the rate limits refused, once per episode and reason."},
			[]string{"reason"}),
	}
	for _, o := range []string{"complete", "incomplete"} {
		m.captures.WithLabelValues(o)
	}
	for _, r := range refusalReasons {
		m.refusals.WithLabelValues(r)
	}
	m.reg.MustRegister(m, m.triggers, m.running, m.captures, m.refusals,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	return m
}

// Describe implements prometheus.Collector for the per-container series.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.periods, m.throttled, m.throttledSec, m.usageSec, m.quota, m.period,
		m.gomaxprocs, m.watchedD} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the last published snapshot.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.levels {
		lv := []string{s.ns, s.pod, s.container, s.level}
		ch <- prometheus.MustNewConstMetric(m.periods, prometheus.CounterValue, float64(s.periods), lv...)
		ch <- prometheus.MustNewConstMetric(m.throttled, prometheus.CounterValue, float64(s.throttled), lv...)
		ch <- prometheus.MustNewConstMetric(m.throttledSec, prometheus.CounterValue, s.throttledSec, lv...)
		ch <- prometheus.MustNewConstMetric(m.usageSec, prometheus.CounterValue, s.usageSec, lv...)
		if s.hasLimits {
			ch <- prometheus.MustNewConstMetric(m.period, prometheus.GaugeValue, s.periodSec, lv...)
			if s.quotaSec >= 0 {
				ch <- prometheus.MustNewConstMetric(m.quota, prometheus.GaugeValue, s.quotaSec, lv...)
			}
		}
	}
	for _, g := range m.gomax {
		ch <- prometheus.MustNewConstMetric(m.gomaxprocs, prometheus.GaugeValue, g.procs, g.ns, g.pod, g.container)
	}
	ch <- prometheus.MustNewConstMetric(m.watchedD, prometheus.GaugeValue, float64(m.watched))
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// refused counts a refusal of the kind allowed() gave.
func (m *metrics) refused(kind string) {
	if r, ok := refusalReasons[kind]; ok {
		m.refusals.WithLabelValues(r).Inc()
	}
}

// sample is a level's last read as a series; ok false before its first read.
func (l *level) sample(s spec) (levelSample, bool) {
	if !l.hasLast {
		return levelSample{}, false
	}
	st := l.last
	thr, use := float64(st.ThrottledTime), float64(st.Usage)
	if st.NsUnits {
		thr, use = thr/1e9, use/1e9
	} else {
		thr, use = thr/1e6, use/1e6
	}
	out := levelSample{ns: s.Namespace, pod: s.Pod, container: s.Container, level: l.name,
		periods: st.Periods, throttled: st.Throttled, throttledSec: thr, usageSec: use}
	if l.name == "pod" {
		out.container = "" // one pod cgroup, watched through each of its limited containers
	}
	if l.limOK {
		out.hasLimits = true
		out.periodSec = float64(l.limits.PeriodUs) / 1e6
		out.quotaSec = -1
		if l.limits.QuotaUs >= 0 {
			out.quotaSec = float64(l.limits.QuotaUs) / 1e6
		}
	}
	return out, true
}

// publishMetrics replaces the snapshot with the watched set as it is now: series of the
// containers no longer watched are gone from the next scrape.
func (a *agent) publishMetrics() {
	m := a.metrics
	if m == nil {
		return
	}
	keys := make([]string, 0, len(a.targets))
	for k := range a.targets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var levels []levelSample
	var gomax []gomaxSample
	at := map[[4]string]int{} // label set -> index: one series per label set
	for _, k := range keys {
		t := a.targets[k]
		for _, l := range t.levels {
			s, ok := l.sample(t.spec)
			if !ok {
				continue
			}
			s.stale = t.capturing
			id := [4]string{s.ns, s.pod, s.container, s.level}
			if i, dup := at[id]; dup {
				// a restarted container's old cgroup beside its new one, or a pod level seen
				// through two containers: the fresher read wins
				if levels[i].stale && !s.stale {
					levels[i] = s
				}
				continue
			}
			at[id] = len(levels)
			levels = append(levels, s)
		}
		if p, ok := gomaxprocsValue(t.spec.GomaxEnv); ok {
			dup := false
			for _, g := range gomax {
				dup = dup || (g.ns == t.spec.Namespace && g.pod == t.spec.Pod && g.container == t.spec.Container)
			}
			if !dup {
				gomax = append(gomax, gomaxSample{t.spec.Namespace, t.spec.Pod, t.spec.Container, p})
			}
		}
	}
	m.mu.Lock()
	m.levels, m.gomax, m.watched = levels, gomax, len(a.targets)
	m.mu.Unlock()
	m.running.Set(float64(a.running))
}

// gomaxprocsValue is the GOMAXPROCS an environment value sets, where it is a number
// ("valueFrom" and other references are not).
func gomaxprocsValue(env *string) (float64, bool) {
	if env == nil {
		return 0, false
	}
	n, err := strconv.Atoi(*env)
	if err != nil || n < 1 {
		return 0, false
	}
	return float64(n), true
}

// serveMetrics listens on addr and serves /metrics until stop is called; the listener is
// open when it returns (an address in use is an error at the agent's start, not a log line).
func (a *agent) serveMetrics(addr string) (net.Addr, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.metrics.handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.ev.emit("error", map[string]any{"error": "metrics server: " + err.Error()})
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
	}
	return ln.Addr(), stop, nil
}
