package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func parseConfig(t *testing.T, args ...string) *config {
	t.Helper()
	var c config
	fs := flag.NewFlagSet("gmp-sampler", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestConfigDefaults(t *testing.T) {
	c := parseConfig(t)
	want := config{root: "/sys/fs/cgroup", interval: 997 * time.Microsecond, out: "-", fifoPrio: 10,
		hostEvery: time.Second, flush: 10 * time.Millisecond}
	if c.cgroups != nil || c.root != want.root || c.interval != want.interval || c.duration != 0 ||
		c.out != want.out || c.fifo || c.fifoPrio != want.fifoPrio || c.summary != "" || c.hostStat != "" ||
		c.hostEvery != want.hostEvery || c.idle || c.flush != want.flush || c.limitsOut != "" ||
		c.limitsEvery != 10*time.Millisecond {
		t.Errorf("defaults %+v, want %+v", *c, want)
	}
}

func TestConfigFlags(t *testing.T) {
	c := parseConfig(t, "--root", "/r", "--cgroup", "a=x", "--cgroup", "y|z", "--interval", "5ms",
		"--duration", "2s", "--out", "o.csv", "--fifo", "--fifo-prio", "20", "--summary", "stderr",
		"--host-stat", "h.csv", "--host-stat-every", "250ms", "--idle", "--flush", "0",
		"--limits-out", "l.csv", "--limits-every", "0")
	if c.root != "/r" || strings.Join(c.cgroups, ";") != "a=x;y|z" || c.interval != 5*time.Millisecond ||
		c.duration != 2*time.Second || c.out != "o.csv" || !c.fifo || c.fifoPrio != 20 || c.summary != "stderr" ||
		c.hostStat != "h.csv" || c.hostEvery != 250*time.Millisecond || !c.idle || c.flush != 0 ||
		c.limitsOut != "l.csv" || c.limitsEvery != 0 {
		t.Errorf("parsed %+v", *c)
	}
	if err := c.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no --cgroup given; example: --cgroup kubepods/burstable/pod<UID>/<containerID>"},
		{[]string{"--cgroup", "g", "--interval", "9us"}, "--interval 9µs is too small (minimum 10µs)"},
		{[]string{"--cgroup", "g", "--limits-every", "-1ms"}, "--limits-every -1ms is negative (0: at every tick)"},
		{[]string{"--cgroup", "g", "--limits-out", "-"},
			"--limits-out -: stdout is not available (it may carry cpu.stat rows); give a file or stderr"},
		{[]string{"--cgroup", "g", "--limits-out", "x.csv", "--out", "x.csv"},
			"--limits-out x.csv is also --out: give the limits their own file"},
		{[]string{"--cgroup", "g", "--limits-out", "x.csv", "--host-stat", "x.csv"},
			"--limits-out x.csv is also --host-stat: give the limits their own file"},
	} {
		err := parseConfig(t, tc.args...).validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
	if err := parseConfig(t, "--cgroup", "g", "--interval", "10us").validate(); err != nil {
		t.Errorf("10µs refused: %v", err)
	}
	if err := parseConfig(t, "--cgroup", "g", "--limits-out", "stderr", "--limits-every", "0").validate(); err != nil {
		t.Errorf("--limits-out stderr --limits-every 0 refused: %v", err)
	}
}

func TestStartHostStat(t *testing.T) {
	if hs, err := startHostStat("", time.Nanosecond); hs != nil || err != nil {
		t.Errorf("off: %v, %v", hs, err)
	}
	_, err := startHostStat("stderr", 999*time.Microsecond)
	if err == nil || err.Error() != "--host-stat-every 999µs is too small (minimum 1ms)" {
		t.Errorf("error %v", err)
	}
}
