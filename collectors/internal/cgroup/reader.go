package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Reader holds a cgroup's counter files open and reads them with pread at offset 0: the
// kernel regenerates the text on every read from offset 0, with no open/close per sample.
// ReadRaw and Parse never allocate unless they fail (the sampler calls them ~1000×/s).
//
// On cgroup v2 it also holds the cgroup's own signals beside cpu.stat, where the kernel
// has them: cpu.pressure (PSI) and cpu.stat.local (6.6+).
type Reader struct {
	*Cgroup
	stat, usage     *os.File
	statFd, useFd   int
	buf, ubuf       []byte
	pressure, local sideFile
}

// sideFile is one of the optional files read beside cpu.stat; f is nil where the cgroup
// has none.
type sideFile struct {
	path string
	f    *os.File
	fd   int
	buf  []byte
	raw  []byte // the last ReadRawSignals' bytes; nil after a ReadRawStat alone
}

// HasPSI: the cgroup's cpu.pressure is read with cpu.stat.
func (r *Reader) HasPSI() bool { return r.pressure.f != nil }

// HasLocal: the cgroup's cpu.stat.local is read with cpu.stat.
func (r *Reader) HasLocal() bool { return r.local.f != nil }

// PressurePath is the cpu.pressure read with cpu.stat; "" where there is none.
func (r *Reader) PressurePath() string { return r.pressure.path }

// LocalPath is the cpu.stat.local read with cpu.stat; "" where there is none.
func (r *Reader) LocalPath() string { return r.local.path }

// StatBufSize: a v2 cpu.stat of 6.x is ~250 bytes; a read that fills the buffer is refused
// rather than parsed cut, so every accepted read is shorter. pread copies only what the
// file holds, so size costs nothing.
const StatBufSize = 16 << 10

// SideBufSize is StatBufSize for cpu.pressure (two lines of at most ~75 bytes) and
// cpu.stat.local (one of ~35).
const SideBufSize = 1 << 10

// Open opens the cgroup's counter files (regular files: see openRegular), and on v2 its
// cpu.pressure and cpu.stat.local beside cpu.stat where they are: a file that does not
// exist (v1 has neither, kernels before 6.6 no cpu.stat.local, 6.1+ booted with psi=0 no
// cpu.pressure) or that answers its first read with EOPNOTSUPP (PSI disabled on a kernel
// that still shows the file) is left out, not an error. Something other than a regular
// file in their place is, as for cpu.stat.
func (c *Cgroup) Open() (*Reader, error) {
	r := &Reader{Cgroup: c, buf: make([]byte, StatBufSize), ubuf: make([]byte, 64), useFd: -1}
	r.pressure.fd, r.local.fd = -1, -1
	var err error
	if r.stat, err = openRegular(c.StatPath); err != nil {
		return nil, err
	}
	r.statFd = int(r.stat.Fd())
	if c.UsagePath != "" {
		if r.usage, err = openRegular(c.UsagePath); err != nil {
			r.stat.Close()
			return nil, err
		}
		r.useFd = int(r.usage.Fd())
	}
	if c.Version == 2 {
		dir := filepath.Dir(c.StatPath)
		if r.pressure, err = openSide(filepath.Join(dir, "cpu.pressure")); err == nil {
			r.local, err = openSide(filepath.Join(dir, "cpu.stat.local"))
		}
		if err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// probeRead is the one read Open makes of an optional file (a variable for the tests: a
// regular file cannot answer EOPNOTSUPP).
var probeRead = unix.Pread

// openSide opens an optional file for pread; a zero sideFile (fd -1) where the cgroup has
// none: the file does not exist, PSI is disabled (psi=0: a kernel that still shows
// cpu.pressure answers every read with EOPNOTSUPP), or it reads empty.
func openSide(path string) (sideFile, error) {
	none := sideFile{fd: -1}
	f, err := openRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return none, nil
	}
	if err != nil {
		return none, err
	}
	buf := make([]byte, SideBufSize)
	n, err := probeRead(int(f.Fd()), buf, 0)
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EOPNOTSUPP) {
			return none, nil
		}
		return none, &GoneError{Path: path, Err: err}
	}
	if n == 0 {
		// cpu.stat.local is a core file (6.6+) that the kernel leaves empty where the cpu
		// controller is not enabled (cgroup_local_stat_show finds no cpu css): none there
		f.Close()
		return none, nil
	}
	return sideFile{path: path, f: f, fd: int(f.Fd()), buf: buf}, nil
}

// Close closes the files.
func (r *Reader) Close() {
	if r.stat != nil {
		r.stat.Close()
	}
	if r.usage != nil {
		r.usage.Close()
	}
	for _, sf := range []*sideFile{&r.pressure, &r.local} {
		if sf.f != nil {
			sf.f.Close()
		}
	}
}

// FileError is a cgroup interface file that cannot be opened as one: something else in
// its place (a directory, a FIFO, a device, a socket) or an open that failed (a symlink
// loop, no permission).
type FileError struct {
	Path   string
	Reason string // "is a FIFO", "cannot be opened (too many levels of symbolic links)", ...
	Err    error  // the system error, if any
	What   string // the file's role ("cpu.stat"); "" = "interface file"
}

func (e *FileError) Error() string {
	what := e.What
	if what == "" {
		what = "interface file"
	}
	return fmt.Sprintf("%s: %s; expected the cgroup's %s, a regular file", e.Path, e.Reason, what)
}
func (e *FileError) Unwrap() error { return e.Err }

// openRegular opens a cgroup interface file for pread. cgroupfs shows its files as regular
// files; anything else in the place is a *FileError found without reading it: the open is
// non-blocking (a FIFO would wait for a writer) and the type is checked on the descriptor
// (no race with a rename). A missing file is an error wrapping fs.ErrNotExist.
func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		// a socket does not open (ENXIO): name what is there rather than the errno
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, &FileError{Path: path, Reason: "is " + fileKind(st.Mode), Err: err}
		}
		return nil, &FileError{Path: path, Reason: "cannot be opened (" + err.Error() + ")", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &FileError{Path: path, Reason: "cannot be examined (" + err.Error() + ")", Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &FileError{Path: path, Reason: "is " + fileKind(st.Mode)}
	}
	// Reads are preads of a regular file: blocking mode, as for any other regular file.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &FileError{Path: path, Reason: "cannot be opened (" + err.Error() + ")", Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return "not a regular file"
}

// GoneError is a read that failed: the cgroup was removed (a container restart, a deleted
// pod; the kernel answers ENODEV) or the file cannot be read any more. An empty read is
// data, and fails to parse.
type GoneError struct {
	Path string
	Err  error
}

func (e *GoneError) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }
func (e *GoneError) Unwrap() error { return e.Err }

// ReadRaw preads cpu.stat (and on v1 cpuacct.usage), then the files beside it
// (ReadRawStat, then ReadRawSignals); the slices stay valid until the next call. A failed
// read is a *GoneError; a read that fills the buffer a *FormatError.
func (r *Reader) ReadRaw() (stat, usage []byte, err error) {
	if stat, usage, err = r.ReadRawStat(); err != nil {
		return nil, nil, err
	}
	if _, _, err = r.ReadRawSignals(); err != nil {
		return nil, nil, err
	}
	return stat, usage, nil
}

// ReadRawStat is ReadRaw's first half: cpu.stat (and on v1 cpuacct.usage) alone, so a
// caller can time that read by itself. A Parse after it leaves the signals unread (their
// Has flags false) until ReadRawSignals reads them.
func (r *Reader) ReadRawStat() (stat, usage []byte, err error) {
	r.pressure.raw, r.local.raw = nil, nil
	n, err := unix.Pread(r.statFd, r.buf, 0)
	if err != nil {
		return nil, nil, &GoneError{Path: r.StatPath, Err: err}
	}
	if n == len(r.buf) {
		return nil, nil, formatError(r.StatPath, 1, firstLine(r.buf), fmt.Sprintf("file larger than the %d-byte read buffer", len(r.buf)))
	}
	if r.useFd >= 0 {
		un, err := unix.Pread(r.useFd, r.ubuf, 0)
		if err != nil {
			return nil, nil, &GoneError{Path: r.UsagePath, Err: err}
		}
		if un == len(r.ubuf) {
			return nil, nil, formatError(r.UsagePath, 1, r.ubuf, fmt.Sprintf("file larger than the %d-byte read buffer", len(r.ubuf)))
		}
		usage = r.ubuf[:un]
	}
	return r.buf[:n], usage, nil
}

// ReadRawSignals is ReadRaw's second half: it preads cpu.pressure and cpu.stat.local
// where the cgroup has them (nil where not), for the next Parse; the slices stay valid
// until the next read. Errors as ReadRaw's.
func (r *Reader) ReadRawSignals() (pressure, local []byte, err error) {
	if err := r.pressure.read(); err != nil {
		return nil, nil, err
	}
	if err := r.local.read(); err != nil {
		return nil, nil, err
	}
	return r.pressure.raw, r.local.raw, nil
}

func (sf *sideFile) read() error {
	sf.raw = nil
	if sf.fd < 0 {
		return nil
	}
	n, err := unix.Pread(sf.fd, sf.buf, 0)
	if err != nil {
		return &GoneError{Path: sf.path, Err: err}
	}
	if n == len(sf.buf) {
		return formatError(sf.path, 1, firstLine(sf.buf), fmt.Sprintf("file larger than the %d-byte read buffer", len(sf.buf)))
	}
	sf.raw = sf.buf[:n]
	return nil
}

// Parse parses what ReadRaw returned into s (v1: usage from cpuacct.usage, ns), and the
// signals the last ReadRawSignals read (s.HasPSI, s.HasLocal: whether there were any).
func (r *Reader) Parse(stat, usage []byte, s *Stat) error {
	if err := ParseStat(r.StatPath, stat, r.Version, s); err != nil {
		return err
	}
	if r.Version == 1 {
		u, err := ParseUsage(r.UsagePath, usage)
		if err != nil {
			return err
		}
		s.Usage = u
	}
	s.PSISome, s.PSIFull, s.HasPSI, s.HasPSIFull = 0, 0, false, false
	if r.pressure.raw != nil {
		if err := ParsePressure(r.pressure.path, r.pressure.raw, s); err != nil {
			return err
		}
	}
	s.LocalThrottled, s.HasLocal = 0, false
	if r.local.raw != nil {
		if err := ParseStatLocal(r.local.path, r.local.raw, s); err != nil {
			return err
		}
	}
	return nil
}

// Read is ReadRaw then Parse.
func (r *Reader) Read(s *Stat) error {
	stat, usage, err := r.ReadRaw()
	if err != nil {
		return err
	}
	return r.Parse(stat, usage, s)
}
