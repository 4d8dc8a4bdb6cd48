package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// The kernel's ranges (Documentation/scheduler/sched-bwc.rst, kernel/sched/core.c
// tg_set_cfs_bandwidth): period and quota are at least 1 ms, the period at most 1 s, the
// quota at most max_cfs_runtime (2^44-1 µs), the burst at most the quota. The kernel
// refuses to store anything else, so a file showing it is not a cgroup file as written by
// the kernel: it is rejected, not clamped.
const (
	DefaultPeriodUs = 100_000
	MinPeriodUs     = 1_000
	MaxPeriodUs     = 1_000_000
	MinQuotaUs      = 1_000
	MaxQuotaUs      = 1<<44 - 1
	NoQuota         = -1 // v1 cpu.cfs_quota_us and Limits.QuotaUs without a limit (v2: "max")
)

// Limits are the CFS bandwidth settings of one cgroup, in µs.
type Limits struct {
	Version  int    `json:"version"`
	PeriodUs uint64 `json:"period_us"`
	QuotaUs  int64  `json:"quota_us"` // NoQuota (-1): no limit
	BurstUs  uint64 `json:"burst_us"`
}

// readOptional reads a cgroup file; a missing file is (nil, nil): the kernel's default.
func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once
		}
		return nil, fmt.Errorf("%s: %w (expected the cgroup's interface file)", path, err)
	}
	if b == nil {
		b = []byte{} // present but empty: not "missing"
	}
	return b, nil
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

// ParseBurst parses cpu.cfs_burst_us (v1) or cpu.max.burst (v2): 0..MaxQuotaUs.
func ParseBurst(path string, data []byte) (uint64, error) {
	line, v, err := singleUint(path, data)
	if err != nil {
		return 0, err
	}
	if v > MaxQuotaUs {
		return 0, formatError(path, 1, line, fmt.Sprintf("burst must be 0..%d µs", int64(MaxQuotaUs)))
	}
	return v, nil
}

// ParseCPUMax parses v2 cpu.max, "QUOTA PERIOD" with QUOTA "max" for no limit. The kernel
// always shows both fields; "QUOTA" alone (the form a write may take, period unchanged)
// is read with the default period.
func ParseCPUMax(path string, data []byte) (quota int64, period uint64, err error) {
	line, err := singleLine(path, data)
	if err != nil {
		return 0, 0, err
	}
	const shape = "expected 'QUOTA PERIOD' in µs (QUOTA may be 'max')"
	q, p := line, []byte(nil)
	if sp := bytes.IndexByte(line, ' '); sp >= 0 {
		q, p = line[:sp], line[sp+1:]
	}
	period = DefaultPeriodUs
	if p != nil {
		var ok bool
		if period, ok = parseUint(p); !ok {
			return 0, 0, formatError(path, 1, line, shape)
		}
		if err := checkPeriod(path, line, period); err != nil {
			return 0, 0, err
		}
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
// the cpu hierarchy). Missing files mean the kernel's defaults: period 100 ms, no quota,
// no burst.
func ReadLimits(dir string, version int) (Limits, error) {
	l := Limits{Version: version, PeriodUs: DefaultPeriodUs, QuotaUs: NoQuota}
	var burstPath string
	var burst []byte
	switch version {
	case 1:
		pp, qp := filepath.Join(dir, "cpu.cfs_period_us"), filepath.Join(dir, "cpu.cfs_quota_us")
		b, err := readOptional(pp)
		if err != nil {
			return l, err
		}
		if b != nil {
			if l.PeriodUs, err = ParsePeriodV1(pp, b); err != nil {
				return l, err
			}
		}
		if b, err = readOptional(qp); err != nil {
			return l, err
		}
		if b != nil {
			if l.QuotaUs, err = ParseQuotaV1(qp, b); err != nil {
				return l, err
			}
		}
		burstPath = filepath.Join(dir, "cpu.cfs_burst_us")
	case 2:
		mp := filepath.Join(dir, "cpu.max")
		b, err := readOptional(mp)
		if err != nil {
			return l, err
		}
		if b != nil {
			if l.QuotaUs, l.PeriodUs, err = ParseCPUMax(mp, b); err != nil {
				return l, err
			}
		}
		burstPath = filepath.Join(dir, "cpu.max.burst")
	default:
		return l, fmt.Errorf("cgroup version must be 1 or 2, not %d", version)
	}
	burst, err := readOptional(burstPath)
	if err != nil {
		return l, err
	}
	if burst != nil {
		if l.BurstUs, err = ParseBurst(burstPath, burst); err != nil {
			return l, err
		}
		if l.QuotaUs != NoQuota && l.BurstUs > uint64(l.QuotaUs) {
			line, _ := singleLine(burstPath, burst)
			return l, formatError(burstPath, 1, line, fmt.Sprintf("burst must not exceed the quota (%d µs)", l.QuotaUs))
		}
	}
	return l, nil
}
