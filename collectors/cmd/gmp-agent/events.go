package main

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// events writes one JSON object per line: {"event": KIND, "mono_ns": ..., ...facts}.
type events struct {
	mu sync.Mutex
	w  io.Writer
}

func newEvents(w io.Writer) *events { return &events{w: w} }

func (e *events) emit(kind string, facts map[string]any) {
	m := map[string]any{"event": kind, "mono_ns": monoNow().Nanoseconds(), "wall": time.Now().UTC().Format(time.RFC3339Nano)}
	for k, v := range facts {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"event": "error", "error": err.Error()})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.Write(append(b, '\n'))
}
