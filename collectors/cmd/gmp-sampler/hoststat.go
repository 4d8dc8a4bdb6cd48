package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gmpanalysis/gmpanalysis/collectors/internal/bundle"
	"golang.org/x/sys/unix"
)

// The host's CPU accounting from /proc/stat, read about once a second beside the cgroup
// counters. It explains holes in the samples: on a VM the hypervisor runs other guests on
// our vCPUs ("steal"), and a sampler that was not running cannot read anything.
//
// Kernel semantics (fs/proc/stat.c): the first line is the aggregate over all CPUs,
//
//	cpu  user nice system idle iowait irq softirq steal guest guest_nice
//
// in USER_HZ ticks (clock_t), NOT kernel HZ: the kernel converts its nanosecond counters
// with nsec_to_clock_t, and user space learns USER_HZ from the AT_CLKTCK auxiliary vector
// entry (what sysconf(_SC_CLK_TCK) returns; 100 on every Linux architecture today, while
// CONFIG_HZ here is 250). guest and guest_nice are ALSO counted in user and nice
// (account_guest_time adds to both), so the machine's total is the sum of the first eight
// fields; adding the guest fields would count that time twice. Inside a container
// /proc/stat is the node's (no namespace covers it), which is what we want.
const hostStatHeader = "t_ns,read_ns,user_us,nice_us,system_us,idle_us,iowait_us,irq_us,softirq_us,steal_us,cpu_total_us,ncpu\n"

// hostCPU is one parse of the aggregate cpu line, in USER_HZ ticks.
type hostCPU struct {
	ticks [8]uint64 // user nice system idle iowait irq softirq steal
	ncpu  int       // per-CPU "cpuN" lines: the CPUs online at the read
}

// parseProcStat parses /proc/stat text. It needs the aggregate "cpu " line with at least
// the eight fields up to steal (Linux ≥ 2.6.11); errors quote the offending line.
func parseProcStat(b []byte) (hostCPU, error) {
	var h hostCPU
	seen := false
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if !bytes.HasPrefix(line, []byte("cpu")) {
			if seen {
				break // the cpu lines come first and together; the rest (intr, ctxt, ...) is long
			}
			continue
		}
		if len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			h.ncpu++
			continue
		}
		if len(line) < 4 || line[3] != ' ' {
			continue
		}
		seen = true
		f := bytes.Fields(line[3:])
		if len(f) < 8 {
			return h, fmt.Errorf("/proc/stat: aggregate cpu line has %d fields, need 8 (user..steal): %q", len(f), line)
		}
		for i := 0; i < 8; i++ {
			v, err := strconv.ParseUint(string(f[i]), 10, 64)
			if err != nil {
				return h, fmt.Errorf("/proc/stat: field %d of the aggregate cpu line is not a number: %q", i+1, line)
			}
			h.ticks[i] = v
		}
	}
	if !seen {
		return h, fmt.Errorf("/proc/stat: no aggregate \"cpu \" line")
	}
	return h, nil
}

// appendHostRow appends one host_stat.csv row (ticks converted to µs with USER_HZ).
func appendHostRow(dst []byte, tNs, readNs int64, h hostCPU, userHz uint64) []byte {
	dst = strconv.AppendInt(dst, tNs, 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, readNs, 10)
	var total uint64
	for _, v := range h.ticks {
		total += v
		dst = append(dst, ',')
		dst = strconv.AppendUint(dst, ticksToUs(v, userHz), 10)
	}
	dst = append(dst, ',')
	dst = strconv.AppendUint(dst, ticksToUs(total, userHz), 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, int64(h.ncpu), 10)
	return append(dst, '\n')
}

// appendHostJSON appends the same row as one JSON line, {"host_stat":{...}}, for a
// collector that reads it from the sampler's stderr (the stdout pipe carries cpu.stat).
func appendHostJSON(dst []byte, tNs, readNs int64, h hostCPU, userHz uint64) []byte {
	names := [8]string{"user_us", "nice_us", "system_us", "idle_us", "iowait_us", "irq_us", "softirq_us", "steal_us"}
	dst = append(dst, `{"host_stat":{"t_ns":`...)
	dst = strconv.AppendInt(dst, tNs, 10)
	dst = append(dst, `,"read_ns":`...)
	dst = strconv.AppendInt(dst, readNs, 10)
	var total uint64
	for i, v := range h.ticks {
		total += v
		dst = append(dst, `,"`...)
		dst = append(dst, names[i]...)
		dst = append(dst, `":`...)
		dst = strconv.AppendUint(dst, ticksToUs(v, userHz), 10)
	}
	dst = append(dst, `,"cpu_total_us":`...)
	dst = strconv.AppendUint(dst, ticksToUs(total, userHz), 10)
	dst = append(dst, `,"ncpu":`...)
	dst = strconv.AppendInt(dst, int64(h.ncpu), 10)
	return append(dst, "}}\n"...)
}

func ticksToUs(t, userHz uint64) uint64 {
	if 1_000_000%userHz == 0 {
		return t * (1_000_000 / userHz)
	}
	return t * 1_000_000 / userHz
}

// userHZ is USER_HZ as the kernel told this process (AT_CLKTCK in the auxiliary vector).
func userHZ() uint64 {
	const atClkTck = 17
	if av, err := unix.Auxv(); err == nil {
		for _, kv := range av {
			if kv[0] == atClkTck && kv[1] > 0 {
				return uint64(kv[1])
			}
		}
	}
	return 100 // USER_HZ on every Linux architecture
}

// hostStat reads /proc/stat from a file kept open (pread at offset 0 regenerates the text)
// and writes a row per read to a CSV file or, as JSON lines, to stderr.
type hostStat struct {
	fd     int
	buf    []byte
	userHz uint64
	w      *os.File
	json   bool
	every  int64 // ns between reads
	next   int64 // CLOCK_MONOTONIC ns of the next read
	row    []byte
	errs   uint64
}

// startHostStat opens what --host-stat and --host-stat-every ask for; nil when dest is "".
func startHostStat(dest string, every time.Duration) (*hostStat, error) {
	if dest == "" {
		return nil, nil
	}
	if every < time.Millisecond {
		return nil, fmt.Errorf("--host-stat-every %v is too small (minimum 1ms)", every)
	}
	return openHostStat(dest, every.Nanoseconds())
}

// openHostStat opens /proc/stat and the destination: a CSV file appended to (header only
// when new), or "stderr" for JSON lines.
func openHostStat(dest string, every int64) (*hostStat, error) {
	fd, err := unix.Open("/proc/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("/proc/stat: %w", err)
	}
	h := &hostStat{fd: fd, buf: make([]byte, 1<<16), userHz: userHZ(), every: every, row: make([]byte, 0, 512)}
	if dest == "stderr" {
		h.w, h.json = os.Stderr, true
		return h, nil
	}
	if _, err := bundle.DropCutLine(dest, hostStatHeader); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("host stat output: %w", err)
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("host stat output: %w", err)
	}
	h.w = f
	if st, err := f.Stat(); err == nil && st.Size() == 0 {
		if _, err := f.WriteString(hostStatHeader); err != nil {
			return nil, fmt.Errorf("host stat output: %w", err)
		}
	}
	return h, nil
}

// sample reads /proc/stat once and writes its row at once (one write(2) per second: a
// killed sampler leaves whole lines). Errors are counted, never fatal: the cgroup
// counters are the primary data.
func (h *hostStat) sample() {
	t0 := monoNs()
	n, err := unix.Pread(h.fd, h.buf, 0)
	// a read that fills the buffer may have been cut (one cpuN line per CPU: about 1,100
	// CPUs fill 64 KiB): read again into a buffer twice the size, kept for the next reads
	for err == nil && n == len(h.buf) && len(h.buf) < 1<<24 {
		h.buf = make([]byte, 2*len(h.buf))
		t0 = monoNs()
		n, err = unix.Pread(h.fd, h.buf, 0)
	}
	t1 := monoNs()
	if err != nil || n <= 0 {
		h.errs++
		return
	}
	c, err := parseProcStat(h.buf[:n])
	if err != nil {
		h.errs++
		return
	}
	if h.json {
		h.row = appendHostJSON(h.row[:0], (t0+t1)/2, t1-t0, c, h.userHz)
	} else {
		h.row = appendHostRow(h.row[:0], (t0+t1)/2, t1-t0, c, h.userHz)
	}
	if _, err := h.w.Write(h.row); err != nil {
		h.errs++
	}
}

// sampleIfDue samples when now (CLOCK_MONOTONIC ns) has reached the next read, and sets
// the one after on the grid of every, skipping the reads now is already past.
func (h *hostStat) sampleIfDue(now int64) {
	if now < h.next {
		return
	}
	h.sample()
	for h.next <= now {
		h.next += h.every
	}
}

func (h *hostStat) close() {
	unix.Close(h.fd)
	if !h.json {
		h.w.Close()
	}
}
