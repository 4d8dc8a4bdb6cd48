package main

import (
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
// it rebuilds the rate limits from the bundles of the last hour and of the cooldown, so a
// restarted agent does not capture again at once.
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
		if err := c.writeMeta(); err == nil {
			err = os.Rename(src, filepath.Join(a.cfg.out, e.Name()))
			a.ev.emit("recovered", map[string]any{"bundle": filepath.Join(a.cfg.out, e.Name()), "ok": err == nil})
		}
	}
	entries, _ = os.ReadDir(a.cfg.out)
	now, mono := time.Now(), monoNow()
	for _, e := range entries {
		if !e.IsDir() || e.Name()[0] == '.' {
			continue
		}
		var m struct {
			Agent struct {
				Workload  string `json:"workload"`
				StartedNs int64  `json:"started_unix_ns"`
			} `json:"agent"`
		}
		b, err := os.ReadFile(filepath.Join(a.cfg.out, e.Name(), "meta.json"))
		if err != nil || json.Unmarshal(b, &m) != nil || m.Agent.StartedNs == 0 {
			continue
		}
		age := now.Sub(time.Unix(0, m.Agent.StartedNs))
		at := mono - age
		if age < time.Hour {
			a.recent = append(a.recent, at)
		}
		if last, ok := a.lastByWl[m.Agent.Workload]; m.Agent.Workload != "" && (!ok || at > last) {
			a.lastByWl[m.Agent.Workload] = at
		}
	}
}
