package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The kernel's ranges (Documentation/scheduler/sched-bwc.rst, kernel/sched/core.c
// tg_set_cfs_bandwidth): period and quota are at least 1 ms, the period at most 1 s, the
// quota at most max_cfs_runtime (2^44-1 µs); with a quota the burst is at most the quota
// and burst + quota at most max_cfs_runtime, without one the burst is bounded only by the
// µs -> ns conversion of its write (cpu_cfs_burst_write_u64). The kernel refuses to store
// anything else, so a file showing it is not a cgroup file as written by the kernel: it is
// rejected, not clamped.
const (
	DefaultPeriodUs   = 100_000
	MinPeriodUs       = 1_000
	MaxPeriodUs       = 1_000_000
	MinQuotaUs        = 1_000
	MaxQuotaUs        = 1<<44 - 1
	MaxBurstNoQuotaUs = (1<<64 - 1) / 1000
	NoQuota           = -1 // v1 cpu.cfs_quota_us and Limits.QuotaUs without a limit (v2: "max")
)

// Limits are the CFS bandwidth settings of one cgroup, in µs.
type Limits struct {
	Version  int    `json:"version"`
	PeriodUs uint64 `json:"period_us"`
	QuotaUs  int64  `json:"quota_us"` // NoQuota (-1): no limit
	BurstUs  uint64 `json:"burst_us"`
}

func checkPeriod(path string, line []byte, v uint64) error {
	if v < MinPeriodUs || v > MaxPeriodUs {
		return formatError(path, 1, line, fmt.Sprintf("period must be %d..%d µs", MinPeriodUs, MaxPeriodUs))
	}
	return nil
}

// singleUint reads a file of one unsigned decimal line: the line and its value.
func singleUint(path string, data []byte) ([]byte, uint64, error) {
	line, err := singleLine(path, data)
	if err != nil {
		return nil, 0, err
	}
	v, ok := parseUint(line)
	if !ok {
		return nil, 0, formatError(path, 1, line, "expected an unsigned decimal integer (µs)")
	}
	return line, v, nil
}

// ParsePeriodV1 parses cpu.cfs_period_us.
func ParsePeriodV1(path string, data []byte) (uint64, error) {
	line, v, err := singleUint(path, data)
	if err != nil {
		return 0, err
	}
	return v, checkPeriod(path, line, v)
}

// ParseQuotaV1 parses cpu.cfs_quota_us: -1 (no limit) or MinQuotaUs..MaxQuotaUs.
func ParseQuotaV1(path string, data []byte) (int64, error) {
	line, err := singleLine(path, data)
	if err != nil {
		return 0, err
	}
	v, ok := parseInt(line)
	if !ok {
		return 0, formatError(path, 1, line, "expected a decimal integer (µs, -1 = no limit)")
	}
	if v != NoQuota && (v < MinQuotaUs || v > MaxQuotaUs) {
		return 0, formatError(path, 1, line, fmt.Sprintf("quota must be -1 (no limit) or %d..%d µs", MinQuotaUs, int64(MaxQuotaUs)))
	}
	return v, nil
}

// ParseBurst parses cpu.cfs_burst_us (v1) or cpu.max.burst (v2) on its own:
// 0..MaxBurstNoQuotaUs. CheckBurst holds it against the quota.
func ParseBurst(path string, data []byte) (uint64, error) {
	line, v, err := singleUint(path, data)
	if err != nil {
		return 0, err
	}
	if v > MaxBurstNoQuotaUs {
		return 0, formatError(path, 1, line, fmt.Sprintf("burst must be 0..%d µs", uint64(MaxBurstNoQuotaUs)))
	}
	return v, nil
}

// CheckBurst applies the kernel's burst rules against the quota (NoQuota: none apply):
// burst at most the quota, burst + quota at most MaxQuotaUs. line is the burst file's.
func CheckBurst(path string, line []byte, burst uint64, quota int64) error {
	switch {
	case quota == NoQuota:
		return nil
	case burst > uint64(quota):
		return formatError(path, 1, line, fmt.Sprintf("burst must not exceed the quota (%d µs)", quota))
	case burst+uint64(quota) > MaxQuotaUs: // no overflow: both are below 2^44 here
		return formatError(path, 1, line, fmt.Sprintf("burst + quota (%d µs) must be at most %d µs", quota, int64(MaxQuotaUs)))
	}
	return nil
}

// ParseCPUMax parses v2 cpu.max, "QUOTA PERIOD" with QUOTA "max" for no limit. The kernel
// shows both fields, always (cpu_max_show); a write may give the quota alone, a read never
// does.
func ParseCPUMax(path string, data []byte) (quota int64, period uint64, err error) {
	line, err := singleLine(path, data)
	if err != nil {
		return 0, 0, err
	}
	const shape = "expected 'QUOTA PERIOD' in µs (QUOTA may be 'max')"
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return 0, 0, formatError(path, 1, line, shape)
	}
	q := line[:sp]
	period, ok := parseUint(line[sp+1:])
	if !ok {
		return 0, 0, formatError(path, 1, line, shape)
	}
	if err := checkPeriod(path, line, period); err != nil {
		return 0, 0, err
	}
	if string(q) == "max" {
		return NoQuota, period, nil
	}
	u, ok := parseUint(q)
	if !ok {
		return 0, 0, formatError(path, 1, line, shape)
	}
	if u < MinQuotaUs || u > MaxQuotaUs {
		return 0, 0, formatError(path, 1, line, fmt.Sprintf("quota must be 'max' or %d..%d µs", MinQuotaUs, int64(MaxQuotaUs)))
	}
	return int64(u), period, nil
}

// ReadLimits reads the bandwidth settings of the cgroup directory dir (on v1 the one in
// the cpu hierarchy) once. Missing files mean the kernel's defaults: period 100 ms, no
// quota, no burst.
func ReadLimits(dir string, version int) (Limits, error) {
	l := Limits{Version: version, PeriodUs: DefaultPeriodUs, QuotaUs: NoQuota}
	r, err := OpenLimits(dir, version)
	if err != nil {
		return l, err
	}
	defer r.Close()
	err = r.Read(&l)
	return l, err
}

// LimitsReader holds a cgroup's bandwidth files open and rereads them with pread at offset
// 0, like Reader does cpu.stat: the kernel formats the value afresh on every read from
// offset 0 (a seq_file), so a quota rewritten in place (a Kubernetes in-place resize) shows
// at the next read through the same descriptor. Read never allocates unless it fails.
type LimitsReader struct {
	Version int
	Dir     string
	// v1: cpu.cfs_period_us, cpu.cfs_quota_us, cpu.cfs_burst_us; v2: cpu.max,
	// cpu.max.burst (files[2] unused).
	files [3]limitFile
	buf   []byte
}

// limitFile is one held limit file; fd -1: the file did not exist when the reader was
// opened (the kernel's default stands for it).
type limitFile struct {
	path string
	f    *os.File
	fd   int
}

// limitsBufSize: the longest legal content is "17592186044415 1000000\n" (23 bytes); a
// read that fills the buffer is refused rather than parsed cut.
const limitsBufSize = 128

// OpenLimits opens the bandwidth files of the cgroup directory dir (on v1 the one in the
// cpu hierarchy). A file that does not exist is not an error: its kernel default stands
// (period 100 ms, no quota, no burst; a v2 root cgroup has no cpu.max, and kernels before
// 5.14 have no burst file). Something other than a regular file in a file's place is.
func OpenLimits(dir string, version int) (*LimitsReader, error) {
	r := &LimitsReader{Version: version, Dir: dir, buf: make([]byte, limitsBufSize)}
	var names []string
	switch version {
	case 1:
		names = []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.cfs_burst_us"}
	case 2:
		names = []string{"cpu.max", "cpu.max.burst"}
	default:
		return nil, fmt.Errorf("cgroup version must be 1 or 2, not %d", version)
	}
	for i := range r.files {
		r.files[i].fd = -1
	}
	for i, n := range names {
		path := filepath.Join(dir, n)
		f, err := openRegular(path)
		if errors.Is(err, fs.ErrNotExist) {
			r.files[i] = limitFile{path: path, fd: -1}
			continue
		}
		if err != nil {
			r.Close()
			return nil, err
		}
		r.files[i] = limitFile{path: path, f: f, fd: int(f.Fd())}
	}
	return r, nil
}

// OpenLimits opens the bandwidth files of c (see the function OpenLimits).
func (c *Cgroup) OpenLimits() (*LimitsReader, error) { return OpenLimits(c.Dir, c.Version) }

// Close closes the files.
func (r *LimitsReader) Close() {
	for i := range r.files {
		if r.files[i].f != nil {
			r.files[i].f.Close()
			r.files[i].f, r.files[i].fd = nil, -1
		}
	}
}

// pread reads one held file; (nil, nil) for a file absent at open. A failed read is a
// *GoneError: on a removed cgroup the kernel answers ENODEV through the held descriptor.
func (r *LimitsReader) pread(lf *limitFile) ([]byte, error) {
	if lf.fd < 0 {
		return nil, nil
	}
	n, err := unix.Pread(lf.fd, r.buf, 0)
	if err != nil {
		return nil, &GoneError{Path: lf.path, Err: err}
	}
	if n == len(r.buf) {
		return nil, formatError(lf.path, 1, firstLine(r.buf), fmt.Sprintf("file larger than the %d-byte read buffer", len(r.buf)))
	}
	return r.buf[:n], nil
}

// Read rereads every file into l with the strict parsers: a value the kernel would not
// store is a *FormatError, a file that no longer reads a *GoneError. l is written only
// when every file read and parsed.
//
// The files are read one after the other, and a writer may change two of them between
// our reads: quota raised, then burst raised (the kernel refuses the other order) can show
// the old quota beside the new burst. A burst above the quota is therefore read once more
// before it is called bad data.
func (r *LimitsReader) Read(l *Limits) error {
	err := r.read(l, false)
	if err == errTorn {
		err = r.read(l, true)
	}
	return err
}

// errTorn: a burst above the quota on a first read (see Read).
var errTorn = errors.New("burst above quota: read again")

func (r *LimitsReader) read(l *Limits, final bool) error {
	out := Limits{Version: r.Version, PeriodUs: DefaultPeriodUs, QuotaUs: NoQuota}
	burstFile := &r.files[2]
	switch r.Version {
	case 1:
		b, err := r.pread(&r.files[0])
		if err != nil {
			return err
		}
		if b != nil {
			if out.PeriodUs, err = ParsePeriodV1(r.files[0].path, b); err != nil {
				return err
			}
		}
		if b, err = r.pread(&r.files[1]); err != nil {
			return err
		}
		if b != nil {
			if out.QuotaUs, err = ParseQuotaV1(r.files[1].path, b); err != nil {
				return err
			}
		}
	case 2:
		b, err := r.pread(&r.files[0])
		if err != nil {
			return err
		}
		if b != nil {
			if out.QuotaUs, out.PeriodUs, err = ParseCPUMax(r.files[0].path, b); err != nil {
				return err
			}
		}
		burstFile = &r.files[1]
	default:
		return fmt.Errorf("cgroup version must be 1 or 2, not %d", r.Version)
	}
	burst, err := r.pread(burstFile)
	if err != nil {
		return err
	}
	if burst != nil {
		if out.BurstUs, err = ParseBurst(burstFile.path, burst); err != nil {
			return err
		}
		line, _ := singleLine(burstFile.path, burst)
		if err := CheckBurst(burstFile.path, line, out.BurstUs, out.QuotaUs); err != nil {
			if !final {
				return errTorn
			}
			return err
		}
	}
	*l = out
	return nil
}
