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
type Reader struct {
	*Cgroup
	stat, usage   *os.File
	statFd, useFd int
	buf, ubuf     []byte
	// cgroup v2's own signals, where the kernel has them: cpu.pressure (PSI) and
	// cpu.stat.local (6.6+); nil when absent or unreadable (psi=0 on the command line)
	psi, local     *os.File
	psiRaw, locRaw []byte // the last read of each
	pbuf, lbuf     []byte
}

// HasPSI: the cgroup's cpu.pressure is read with cpu.stat.
func (r *Reader) HasPSI() bool { return r.psi != nil }

// HasLocal: the cgroup's cpu.stat.local is read with cpu.stat.
func (r *Reader) HasLocal() bool { return r.local != nil }

// statBufSize: a v2 cpu.stat of 6.x is ~250 bytes; a read that fills the buffer is refused
// rather than parsed cut. pread copies only what the file holds, so size costs nothing.
const statBufSize = 16 << 10

// Open opens the cgroup's counter files (regular files: see openRegular).
func (c *Cgroup) Open() (*Reader, error) {
	r := &Reader{Cgroup: c, buf: make([]byte, statBufSize), ubuf: make([]byte, 64), useFd: -1}
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
		r.psi, r.pbuf = openOptional(filepath.Join(c.Dir, "cpu.pressure"), 256)
		r.local, r.lbuf = openOptional(filepath.Join(c.Dir, "cpu.stat.local"), 256)
	}
	return r, nil
}

// openOptional opens a file the kernel may not have (a newer kernel's, or PSI turned off:
// its read then fails with EOPNOTSUPP): nil unless it opens as a regular file and one read
// of it succeeds.
func openOptional(path string, size int) (*os.File, []byte) {
	f, err := openRegular(path)
	if err != nil {
		return nil, nil
	}
	buf := make([]byte, size)
	if _, err := unix.Pread(int(f.Fd()), buf, 0); err != nil {
		f.Close()
		return nil, nil
	}
	return f, buf
}

// Close closes the files.
func (r *Reader) Close() {
	r.stat.Close()
	if r.usage != nil {
		r.usage.Close()
	}
	for _, f := range []*os.File{r.psi, r.local} {
		if f != nil {
			f.Close()
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

// ReadRaw preads cpu.stat (and on v1 cpuacct.usage); the slices stay valid until the next
// call. A failed read is a *GoneError; a read that fills the buffer a *FormatError.
func (r *Reader) ReadRaw() (stat, usage []byte, err error) {
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
	if r.psi, r.psiRaw, err = readOptional(r.psi, r.pbuf, r.StatPath, "cpu.pressure"); err != nil {
		return nil, nil, err
	}
	if r.local, r.locRaw, err = readOptional(r.local, r.lbuf, r.StatPath, "cpu.stat.local"); err != nil {
		return nil, nil, err
	}
	return r.buf[:n], usage, nil
}

// readOptional preads an optional file kept open beside cpu.stat.
func readOptional(f *os.File, buf []byte, statPath, name string) (*os.File, []byte, error) {
	if f == nil {
		return nil, nil, nil
	}
	n, err := unix.Pread(int(f.Fd()), buf, 0)
	if err != nil {
		return f, nil, &GoneError{Path: f.Name(), Err: err}
	}
	if n == len(buf) {
		return f, nil, formatError(f.Name(), 1, firstLine(buf), fmt.Sprintf("file larger than the %d-byte read buffer", len(buf)))
	}
	return f, buf[:n], nil
}

// Parse parses what ReadRaw returned into s (v1: usage from cpuacct.usage, ns).
func (r *Reader) Parse(stat, usage []byte, s *Stat) error {
	if err := ParseStat(r.StatPath, stat, r.Version, s); err != nil {
		return err
	}
	if r.psi != nil && r.psiRaw != nil {
		if err := ParsePressure(r.psi.Name(), r.psiRaw, s); err != nil {
			return err
		}
	}
	if r.local != nil && r.locRaw != nil {
		if err := ParseStatLocal(r.local.Name(), r.locRaw, s); err != nil {
			return err
		}
	}
	if r.Version == 1 {
		u, err := ParseUsage(r.UsagePath, usage)
		if err != nil {
			return err
		}
		s.Usage = u
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
