package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// capture is one bundle being written: the sampler at 997 µs on the container's levels for
// the window, and the trace over the same window where the pod declares a pprof port.
type capture struct {
	cfg    *config
	target *watched // for the agent's bookkeeping only: the goroutine reads spec and args
	spec   spec     // the container as listed when the capture began (a copy: listings go on)
	args   []string // the sampler's --cgroup arguments
	dir    string   // where the bundle is written: OUT/.partial/NAME
	final  string   // where it goes when the capture ends: OUT/NAME
	meta   map[string]any
	mu     sync.Mutex // meta: the trace goroutine and the sampler's stderr both fill it
}

type captureResult struct {
	target   *watched
	dir      string
	complete bool
	err      string
}

var (
	keepRe   = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,62}$`)
	unsafeRe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
)

// safe makes an API name one path component (a hostile "../x" stays inside --out), by the
// project's one rule (gmpanalysis/names.py, golden cases in tests/data/names.json): a name
// of at most 63 letters, digits and ._- not starting with a dot is kept; anything else is
// its safe characters (others as _, leading dots dropped, at most 54) and "~" with 8 hex
// digits of its SHA-256, so two different names never share a component.
func safe(s string) string {
	if keepRe.MatchString(s) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	stem := strings.TrimLeft(unsafeRe.ReplaceAllString(s, "_"), ".")
	if len(stem) > 54 {
		stem = stem[:54]
	}
	if stem == "" {
		stem = "_"
	}
	return stem + "~" + hex.EncodeToString(sum[:4])
}

// newCapture prepares a capture on the agent's goroutine: everything it needs of the
// watched container is copied here, since listings and reads go on while it runs.
func newCapture(cfg *config, t *watched, workload string) *capture {
	stamp := time.Now().UTC().Format("20060102T150405Z")
	s := t.spec
	name := safe(s.Pod) + "-" + safe(s.Container) + "-" + stamp
	if s.Namespace != "" {
		name = safe(s.Namespace) + "-" + name
	}
	// two captures of one second whose names reduce alike stay apart
	var r [3]byte
	rand.Read(r[:])
	name += "-" + hex.EncodeToString(r[:])
	c := &capture{cfg: cfg, target: t, spec: s, dir: filepath.Join(cfg.out, partialDir, name),
		final: filepath.Join(cfg.out, name)}
	for _, l := range t.levels {
		c.args = append(c.args, "--cgroup", l.name+"="+l.spec)
	}
	c.meta = newMeta(cfg, t, name)
	ag := c.meta["agent"].(map[string]any)
	ag["workload"], ag["started_unix_ns"] = workload, time.Now().UnixNano()
	return c
}

func (c *capture) run(ctx context.Context) captureResult {
	res := captureResult{target: c.target, dir: c.final}
	if err := os.MkdirAll(filepath.Dir(c.dir), 0o755); err != nil {
		res.err = fmt.Sprintf("%v (is --out writable, is its disk full?)", err)
		return res
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		res.err = fmt.Sprintf("%v (is --out writable, is its disk full?)", err)
		return res
	}
	if err := c.writeMeta(); err != nil {
		res.err = fmt.Sprintf("%v (is --out writable, is its disk full?)", err)
		return res
	}
	var wg sync.WaitGroup
	var traceErr error
	traced := c.spec.PprofPort > 0
	// With a trace, the sampling runs from the request until the trace's body has ended:
	// a throttled, overloaded process begins its trace late and ends it later still
	// (docs/kubernetes.md: the node agent), and the samples must cover the trace's whole span.
	window := c.cfg.capture
	traceDone := make(chan struct{})
	if traced {
		window += c.cfg.traceTimeout
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(traceDone)
			traceErr = c.trace(ctx)
		}()
	}
	rc, stopReason, err := c.sample(ctx, window, traceDone)
	wg.Wait()

	c.mu.Lock()
	defer c.mu.Unlock()
	var problems []string
	if err != nil {
		problems = append(problems, "sampler: "+err.Error())
	} else if rc == 3 {
		// the sampler exits 3 when a cgroup it reads goes away: the container ended,
		// restarted or its pod was deleted mid-capture; what was read is in the bundle
		problems = append(problems, "the container went away mid-capture (sampler: "+stopReason+")")
	} else if rc != 0 && ctx.Err() == nil {
		problems = append(problems, fmt.Sprintf("sampler exit %d: %s", rc, stopReason))
	}
	if ctx.Err() != nil {
		problems = append(problems, "the agent stopped before the end of the window")
	}
	if traced && traceErr != nil {
		problems = append(problems, "trace: "+traceErr.Error())
	}
	start, end := rowSpan(filepath.Join(c.dir, "cpu_stat.csv"))
	if start == nil && len(problems) == 0 {
		problems = append(problems, "the sampler wrote no rows")
	}
	c.meta["mono_start_ns"], c.meta["mono_end_ns"] = start, end
	c.meta["complete"] = len(problems) == 0
	if len(problems) > 0 {
		msg := problems[0]
		for _, p := range problems[1:] {
			msg += "; " + p
		}
		c.meta["error"] = msg
		res.err = msg
	}
	if err := c.writeMetaLocked(); err != nil && res.err == "" {
		res.err = err.Error()
	}
	// the bundle is whole: into OUT, where `store put` takes it
	if err := os.Rename(c.dir, c.final); err != nil {
		res.dir = c.dir
		if res.err == "" {
			res.err = err.Error()
		}
	}
	res.complete = len(problems) == 0 && res.err == ""
	return res
}

// sample runs gmp-sampler on the container's levels for the window (or, once done is
// closed, for the capture's length at least), its rows into the bundle's cpu_stat.csv, host_stat.csv and limits.csv (each appended and flushed by the
// sampler itself), and reads its JSON start and summary lines from stderr into meta.
func (c *capture) sample(ctx context.Context, window time.Duration, done <-chan struct{}) (rc int, stopReason string, err error) {
	args := []string{"--root", c.cfg.root, "--interval", c.cfg.interval.String(),
		"--duration", window.String(), "--out", filepath.Join(c.dir, "cpu_stat.csv"),
		"--host-stat", filepath.Join(c.dir, "host_stat.csv"), "--limits-out", filepath.Join(c.dir, "limits.csv"),
		"--summary", "stderr"}
	if c.cfg.fifo {
		args = append(args, "--fifo")
	}
	args = append(args, c.args...)
	cmd := exec.Command(c.cfg.sampler, args...)
	// the sampler ends with the agent, writing its summary on the way out (SIGTERM)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, "", err
	}
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	begun := time.Now()
	stop := context.AfterFunc(ctx, func() { cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	exited := make(chan struct{})
	defer close(exited)
	go func() {
		select {
		case <-done:
			// the trace has ended (or failed): a few periods after it, and at least the
			// capture's length in all, then stop
			wait := 300 * time.Millisecond
			if left := time.Until(begun.Add(c.cfg.capture)); left > wait {
				wait = left
			}
			select {
			case <-time.After(wait):
				cmd.Process.Signal(syscall.SIGTERM)
			case <-exited:
			}
		case <-exited:
		}
	}()
	var prose []string
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var m map[string]json.RawMessage
		if len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &m) == nil {
			for k, raw := range m {
				facts, err := decodeFacts(raw)
				if err != nil {
					continue
				}
				switch k {
				case "start", "summary":
					c.mu.Lock()
					recordSampler(c.meta, facts, k == "summary")
					if k == "summary" {
						stopReason, _ = facts["stop_reason"].(string)
					}
					werr := c.writeMetaLocked()
					c.mu.Unlock()
					if werr != nil {
						prose = append(prose, werr.Error())
					}
				case "error":
					stopReason = fmt.Sprint(facts["message"])
				}
			}
			continue
		}
		prose = append(prose, string(line))
	}
	// a line past the scanner's limit ends the scan: what follows is drained, so the
	// sampler never blocks on a full pipe and Wait returns
	io.Copy(io.Discard, stderr)
	werr := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if ee.ExitCode() < 0 && ctx.Err() != nil {
			return 0, stopReason, nil
		}
		if stopReason == "" && len(prose) > 0 {
			stopReason = prose[len(prose)-1]
		}
		return ee.ExitCode(), stopReason, nil
	}
	return 0, stopReason, werr
}

// trace fetches /debug/pprof/trace for the window from the pod's declared port, appending
// the body to trace.out as it arrives. A host-network pod shares the node's network, and
// the agent runs on that node: it is asked on the loopback address.
func (c *capture) trace(ctx context.Context) error {
	s := c.spec
	host := s.PodIP
	if s.HostNetwork {
		host = "127.0.0.1"
	}
	secs := int(c.cfg.capture.Round(time.Second).Seconds())
	u := "http://" + net.JoinHostPort(host, strconv.Itoa(s.PprofPort)) + "/debug/pprof/trace?seconds=" + strconv.Itoa(secs)
	facts := map[string]any{"url": u, "mono_request_ns": monoNow().Nanoseconds()}
	defer func() {
		facts["mono_done_ns"] = monoNow().Nanoseconds()
		if st, err := os.Stat(filepath.Join(c.dir, "trace.out")); err == nil {
			facts["bytes"] = st.Size()
		} else {
			facts["bytes"] = 0
		}
		c.mu.Lock()
		c.meta["trace"] = facts
		c.mu.Unlock()
	}()
	if host == "" {
		facts["complete"], facts["error"] = false, "the pod has no IP yet"
		return fmt.Errorf("the pod has no IP yet")
	}
	tctx, cancel := context.WithTimeout(ctx, c.cfg.capture+c.cfg.traceTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(tctx, http.MethodGet, u, nil)
	if err != nil {
		facts["complete"], facts["error"] = false, err.Error()
		return err
	}
	resp, err := traceClient.Do(req)
	if err != nil {
		facts["complete"], facts["error"] = false, err.Error()
		return err
	}
	defer resp.Body.Close()
	facts["http_status_line"] = resp.Proto + " " + resp.Status
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		err := fmt.Errorf("GET %s answered %s: %q", u, resp.Status, body)
		facts["complete"], facts["error"] = false, err.Error()
		return err
	}
	// a pod's annotation chose the port: only a Go execution trace is kept, and no more of
	// it than --max-trace-bytes
	body := bufio.NewReaderSize(resp.Body, 64<<10)
	head, err := body.Peek(len(traceMagic))
	if err != nil || string(head) != traceMagic {
		err := fmt.Errorf("GET %s: the body is not a Go execution trace (it begins %q)", u, head)
		facts["complete"], facts["error"] = false, err.Error()
		return err
	}
	f, err := os.OpenFile(filepath.Join(c.dir, "trace.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		facts["complete"], facts["error"] = false, err.Error()
		return err
	}
	defer f.Close()
	// os.File writes go to the kernel at once: what arrived is on disk if the agent dies
	n, err := io.Copy(f, io.LimitReader(body, c.cfg.maxTrace))
	if err != nil {
		facts["complete"], facts["error"] = false, fmt.Sprintf("the body broke off: %v", err)
		return fmt.Errorf("the body broke off: %w", err)
	}
	if n >= c.cfg.maxTrace {
		err := fmt.Errorf("the trace was cut at --max-trace-bytes (%d)", c.cfg.maxTrace)
		facts["complete"], facts["error"] = false, err.Error()
		return err
	}
	facts["complete"] = true
	return nil
}

// traceMagic starts every Go execution trace ("go 1.22 trace\x00\x00\x00" and the like).
const traceMagic = "go 1."

// traceClient never follows a redirect: the port was named by a pod, and a redirect could
// point the node's network identity at anything (a cloud metadata endpoint).
var traceClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// rowSpan is the t_ns of the first and last whole rows of cpu_stat.csv (nil when none).
func rowSpan(path string) (first, last any) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] < '0' || line[0] > '9' {
			continue
		}
		i := 0
		for i < len(line) && line[i] != ',' {
			i++
		}
		if i == len(line) {
			continue // a cut last line
		}
		v, err := strconv.ParseInt(line[:i], 10, 64)
		if err != nil {
			continue
		}
		if first == nil {
			first = v
		}
		last = v
	}
	return first, last
}

func (c *capture) writeMeta() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeMetaLocked()
}

// writeMetaLocked replaces meta.json atomically (a temporary file renamed over it): a
// reader sees the old or the new file, never half of one.
func (c *capture) writeMetaLocked() error {
	b, err := json.MarshalIndent(c.meta, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.dir, ".meta.json.tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	// synced before the rename: after a host crash the name never points at empty blocks
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(c.dir, "meta.json"))
}
