package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The spool: captures are written under OUT/.partial/NAME and renamed to OUT/NAME when they
// end, so a bundle directly under OUT is a finished one (what `gmpanalysis store put`
// takes) and nothing of a capture in progress is ever taken for whole.
const partialDir = ".partial"

// dirBytes is the size of the files under dir (0 if it does not exist).
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// recoverSpool finishes the captures an earlier agent left in .partial (killed, OOM, a node
// reboot): each is flagged incomplete, given the span of its rows, and moved into OUT. Then
// it rebuilds the rate limits from the capture log, so a restarted agent does not capture
// again at once (the bundles themselves may have been moved to the store).
func (a *agent) recoverSpool() {
	partial := filepath.Join(a.cfg.out, partialDir)
	entries, _ := os.ReadDir(partial)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		src := filepath.Join(partial, e.Name())
		c := &capture{dir: src}
		b, err := os.ReadFile(filepath.Join(src, "meta.json"))
		if err != nil || json.Unmarshal(b, &c.meta) != nil || c.meta == nil {
			a.ev.emit("error", map[string]any{"bundle": src, "error": "an unfinished capture without a readable " +
				"meta.json: left in place; remove it by hand"})
			continue
		}
		start, end := rowSpan(filepath.Join(src, "cpu_stat.csv"))
		c.meta["mono_start_ns"], c.meta["mono_end_ns"] = start, end
		c.meta["complete"] = false
		c.meta["error"] = "the agent stopped mid-capture (finished by the next agent at its start)"
		err = c.writeMeta()
		if err == nil {
			err = os.Rename(src, filepath.Join(a.cfg.out, e.Name()))
		}
		facts := map[string]any{"bundle": filepath.Join(a.cfg.out, e.Name()), "ok": err == nil}
		if err != nil {
			facts["bundle"], facts["error"] = src, err.Error()
		}
		a.ev.emit("recovered", facts)
	}
	a.loadCaptureLog()
}

// captureLog is OUT/.captures.jsonl: one line per capture begun (its workload and wall
// time), what the rate limits are rebuilt from after a restart.
const captureLog = ".captures.jsonl"

type logged struct {
	Workload  string `json:"workload"`
	StartedNs int64  `json:"started_unix_ns"`
}

// logCapture appends a capture to the log (best effort: a lost line only loosens the
// limits after a restart).
func (a *agent) logCapture(workload string, started time.Time) {
	b, _ := json.Marshal(logged{workload, started.UnixNano()})
	f, err := os.OpenFile(filepath.Join(a.cfg.out, captureLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	f.Write(append(b, '\n'))
	f.Close()
}

// loadCaptureLog seeds the node budget and the cooldowns from the log, and rewrites it with
// only the entries that still matter.
func (a *agent) loadCaptureLog() {
	path := filepath.Join(a.cfg.out, captureLog)
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	keep := time.Hour
	if a.cfg.cooldown > keep {
		keep = a.cfg.cooldown
	}
	now, mono := time.Now(), monoNow()
	var kept []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		var l logged
		if json.Unmarshal(line, &l) != nil || l.StartedNs == 0 {
			continue // a cut last line
		}
		age := now.Sub(time.Unix(0, l.StartedNs))
		if age > keep {
			continue
		}
		kept = append(append(kept, line...), '\n')
		at := mono - age
		if age < time.Hour {
			a.recent = append(a.recent, at)
		}
		if last, ok := a.lastByWl[l.Workload]; l.Workload != "" && (!ok || at > last) {
			a.lastByWl[l.Workload] = at
		}
	}
	tmp := path + ".tmp"
	if os.WriteFile(tmp, kept, 0o644) == nil {
		os.Rename(tmp, path)
	}
}
