package demoapp

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func testServer(t *testing.T) (*app, *httptest.Server) {
	t.Helper()
	a := &app{ipm: 2000, workMs: 1, allocKB: 0, liveMB: 1, heap: newLiveHeap(1), cpuHdr: true}
	mux := http.NewServeMux()
	a.routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return a, srv
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestWorkConcurrent serves /work to many clients at once, as under load: every request
// runs on its own net/http goroutine, so shared state the handler writes (sink, the live
// heap) must be synchronised; `go test -race` fails this test otherwise.
func TestWorkConcurrent(t *testing.T) {
	_, srv := testServer(t)
	const clients, each = 8, 4
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				resp, err := http.Get(srv.URL + "/work?ms=0.5&alloc_kb=64")
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != "ok 1000\n" {
					errs <- fmt.Errorf("status %d body %q, want 200 \"ok 1000\\n\"", resp.StatusCode, b)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestWorkRejectsBadParameters(t *testing.T) {
	_, srv := testServer(t)
	for _, q := range []string{"ms=-1", "ms=x", "ms=10001", "alloc_kb=-1", "alloc_kb=1.5", "alloc_kb=1048577"} {
		if code, body := get(t, srv.URL+"/work?"+q); code != http.StatusBadRequest {
			t.Errorf("/work?%s: status %d (%q), want 400", q, code, body)
		}
	}
}

func TestInfoAndReadyLine(t *testing.T) {
	a, srv := testServer(t)
	code, body := get(t, srv.URL+"/info")
	if code != http.StatusOK {
		t.Fatalf("/info: status %d", code)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatalf("/info is not JSON: %v: %q", err, body)
	}
	if _, ok := info["default_godebug"].(string); !ok || info["iters_per_ms"] != float64(2000) ||
		info["gomaxprocs"] == nil || info["go_version"] == nil {
		t.Errorf("/info = %v", info)
	}

	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	line, err := a.readyLine("text", addr)
	if err != nil || !strings.HasPrefix(line, "listening http://127.0.0.1:8080 ") {
		t.Errorf("text ready line %q, %v", line, err)
	}
	line, err = a.readyLine("json", addr)
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Listening map[string]any `json:"listening"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.Listening["addr"] != "127.0.0.1:8080" ||
		ready.Listening["iters_per_ms"] != float64(2000) || ready.Listening["default_godebug"] != defaultGODEBUG() ||
		strings.Contains(line, "\n") {
		t.Errorf("json ready line %q: %v", line, err)
	}
	if _, err := a.readyLine("yaml", addr); err == nil {
		t.Error("readyLine accepted format yaml")
	}
}

// TestCPUHeader: a request's reported CPU is the calibrated work it was asked for (the
// thread CPU clock counts only running, so other load on the machine does not inflate it),
// and a server started without the header sends none.
func TestCPUHeader(t *testing.T) {
	a, srv := testServer(t)
	a.ipm = calibrate()
	for _, ms := range []float64{5, 20} {
		resp, err := http.Get(fmt.Sprintf("%s/work?ms=%g", srv.URL, ms))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		v := resp.Header.Get(CPUHeader)
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("ms=%g: %s header %q is not an integer", ms, CPUHeader, v)
		}
		// the calibration is the best of seven rounds, so a request takes at least about
		// its ms; a handler's own overhead is microseconds
		if got := float64(ns) / 1e6; got < 0.8*ms || got > 2*ms {
			t.Errorf("ms=%g: %s = %.2f ms of CPU, want about %g", ms, CPUHeader, got, ms)
		}
	}
	a.cpuHdr = false
	resp, err := http.Get(srv.URL + "/work?ms=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := resp.Header.Get(CPUHeader); v != "" {
		t.Errorf("cpu header off: got %s: %q", CPUHeader, v)
	}
}
