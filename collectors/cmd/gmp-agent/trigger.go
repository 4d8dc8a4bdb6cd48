package main

import (
	"encoding/json"
	"time"
)

// trigger says when a watched container is worth a capture. Both rules read cumulative
// counters at two instants, so reading them once a second loses nothing: nr_periods counts
// the CFS periods in which the group ran (its bandwidth timer was active), nr_throttled
// those that ended with it throttled, throttled time the CPU time its runqueues stood
// frozen, summed over CPUs.
type trigger struct {
	periods      int     // the throttled share is taken over the last this many periods
	share        float64 // fire at this throttled share of them (0: off)
	frozenPerMin float64 // fire at this many frozen CPU-seconds per minute (0: off)
}

// point is one read of a level's counters.
type point struct {
	t         time.Duration // CLOCK_MONOTONIC of the read
	periods   uint64
	throttled uint64
	frozenUs  uint64 // throttled time, µs
}

// history keeps a level's recent reads, enough to look back over a minute and over the
// trigger's periods. A counter that goes back (the cgroup was replaced: a restarted
// container has a new one, with counters from zero) starts it again.
type history struct {
	pts []point
	max int
}

func (h *history) add(p point) {
	if n := len(h.pts); n > 0 {
		last := h.pts[n-1]
		if p.periods < last.periods || p.throttled < last.throttled || p.frozenUs < last.frozenUs {
			h.pts = h.pts[:0]
		}
	}
	h.pts = append(h.pts, p)
	if len(h.pts) > h.max {
		h.pts = append(h.pts[:0], h.pts[len(h.pts)-h.max:]...)
	}
}

// verdict is what the trigger saw on one level.
type verdict struct {
	Fire         bool    `json:"fire"`
	Share        float64 `json:"throttled_share"`      // over Periods periods; -1 when fewer have run
	Periods      uint64  `json:"periods"`              // periods the share is taken over
	FrozenPerMin float64 `json:"frozen_cpu_s_per_min"` // -1 when less than 10 s is known
	Span         float64 `json:"frozen_span_s"`
}

// MarshalJSON writes a figure not known yet (-1 inside) as null: the log and meta.json
// say "unknown", never a negative share or rate a reader could take for a measurement.
func (v verdict) MarshalJSON() ([]byte, error) {
	known := func(x float64) *float64 {
		if x < 0 {
			return nil
		}
		return &x
	}
	return json.Marshal(struct {
		Fire         bool     `json:"fire"`
		Share        *float64 `json:"throttled_share"`
		Periods      uint64   `json:"periods"`
		FrozenPerMin *float64 `json:"frozen_cpu_s_per_min"`
		Span         float64  `json:"frozen_span_s"`
	}{v.Fire, known(v.Share), v.Periods, known(v.FrozenPerMin), v.Span})
}

// judge applies the trigger to a history. The share is taken from the latest read back to
// the newest read at least tr.periods periods before it (a group that barely runs takes
// long to fill them: an idle container never fires); the frozen rate over the last minute,
// or as much of it as is known, if at least 10 s.
func (tr trigger) judge(h *history) verdict {
	v := verdict{Share: -1, FrozenPerMin: -1}
	n := len(h.pts)
	if n < 2 {
		return v
	}
	last := h.pts[n-1]
	for i := n - 2; i >= 0; i-- {
		p := h.pts[i]
		if d := last.periods - p.periods; d >= uint64(tr.periods) {
			v.Periods = d
			v.Share = float64(last.throttled-p.throttled) / float64(d)
			break
		}
	}
	for i := 0; i < n-1; i++ {
		p := h.pts[i]
		span := last.t - p.t
		if span > time.Minute+time.Second/2 {
			continue
		}
		if span >= 10*time.Second {
			v.Span = span.Seconds()
			v.FrozenPerMin = float64(last.frozenUs-p.frozenUs) / 1e6 / span.Minutes()
		}
		break
	}
	v.Fire = (tr.share > 0 && v.Share >= tr.share) || (tr.frozenPerMin > 0 && v.FrozenPerMin >= tr.frozenPerMin)
	return v
}
