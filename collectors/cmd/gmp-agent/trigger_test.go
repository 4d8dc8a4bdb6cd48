package main

import (
	"testing"
	"time"
)

func hist(pts ...point) *history {
	h := &history{max: 100}
	for _, p := range pts {
		h.add(p)
	}
	return h
}

func TestJudgeShare(t *testing.T) {
	tr := trigger{periods: 20, share: 0.25}
	// 10 periods a second, 3 of each 10 throttled: 30 %
	var pts []point
	for i := 0; i <= 5; i++ {
		pts = append(pts, point{t: time.Duration(i) * time.Second, periods: uint64(10 * i), throttled: uint64(3 * i)})
	}
	v := tr.judge(hist(pts...))
	if !v.Fire || v.Periods != 20 || v.Share != 0.3 {
		t.Fatalf("verdict %+v, want fire at 0.3 over 20 periods", v)
	}
	// fewer periods than asked: no share, no fire (a container that barely ran)
	v = tr.judge(hist(pts[:2]...))
	if v.Fire || v.Share != -1 {
		t.Fatalf("verdict %+v over 10 periods, want none", v)
	}
	// below the share: 2 of 10
	for i := range pts {
		pts[i].throttled = uint64(2 * i)
	}
	if v = tr.judge(hist(pts...)); v.Fire || v.Share != 0.2 {
		t.Fatalf("verdict %+v, want 0.2 and no fire", v)
	}
}

func TestJudgeFrozen(t *testing.T) {
	tr := trigger{periods: 1000, frozenPerMin: 1}
	// 50 ms frozen CPU time a second = 3 s a minute
	var pts []point
	for i := 0; i <= 90; i++ {
		pts = append(pts, point{t: time.Duration(i) * time.Second, periods: uint64(10 * i), frozenUs: uint64(50_000 * i)})
	}
	v := tr.judge(hist(pts...))
	if !v.Fire || v.FrozenPerMin < 2.99 || v.FrozenPerMin > 3.01 || v.Span != 60 {
		t.Fatalf("verdict %+v, want 3 CPU-s/min over the last 60 s", v)
	}
	// less than 10 s known: no rate
	if v = tr.judge(hist(pts[:5]...)); v.Fire || v.FrozenPerMin != -1 {
		t.Fatalf("verdict %+v over 4 s, want none", v)
	}
}

func TestHistoryReset(t *testing.T) {
	// a restarted container's new cgroup counts from zero: the history starts again, so
	// the drop is never read as a huge (wrapped) increase
	h := hist(point{periods: 100, throttled: 90}, point{t: time.Second, periods: 110, throttled: 99},
		point{t: 2 * time.Second, periods: 3, throttled: 0})
	if len(h.pts) != 1 || h.pts[0].periods != 3 {
		t.Fatalf("history %+v, want only the read after the reset", h.pts)
	}
	if v := (trigger{periods: 2, share: 0.1}).judge(h); v.Fire {
		t.Fatalf("fired on one read: %+v", v)
	}
}

func TestHistoryBounded(t *testing.T) {
	h := &history{max: 5}
	for i := 0; i < 50; i++ {
		h.add(point{t: time.Duration(i), periods: uint64(i)})
	}
	if len(h.pts) != 5 || h.pts[0].periods != 45 {
		t.Fatalf("history %+v, want the last 5", h.pts)
	}
}
