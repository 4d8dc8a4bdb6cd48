package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// DropCutLine readies an existing CSV file at path for appending: a writer killed mid-write
// (a full disk, a node that lost power) leaves a last line without its newline, and the
// first row appended after a restart would be glued onto it, one line of two rows that no
// reader can take. The cut line, never a whole row, is cut off, so the file ends where its
// last whole row ends and the appended rows start on a line of their own. A file without any
// newline is emptied where it holds only the start of one of the writer's headers, or only
// zero bytes (what a file system leaves of data a crash kept from the disk), so the writer
// begins it again. A file whose first line is none of headers (given any) is not one this
// writer began, and rows appended to it would be of another shape than its own: it is
// refused, cut or not. A missing file, an empty one or one that is not a regular file (a
// pipe, /dev/stdout) is left alone. Returns the bytes cut off.
func DropCutLine(path string, headers ...string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		return 0, nil
	}
	size := st.Size()
	buf := make([]byte, 1)
	if _, err := f.ReadAt(buf, size-1); err != nil {
		return 0, fmt.Errorf("%s: reading its last byte: %w", path, err)
	}
	if buf[0] == '\n' {
		return 0, begunWith(f, path, headers)
	}
	// the last newline: rows are short, so a few small reads back from the end find it
	buf = make([]byte, 4096)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil {
			return 0, fmt.Errorf("%s: reading its last line: %w", path, err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if now, err := f.Stat(); err != nil || now.Size() != size {
				// it grew while it was read: a writer is at work on it, whose rows a cut
				// would take; the collectors append to a file of their own alone
				return 0, fmt.Errorf("%s: another process is writing it; give each collector a file of its own", path)
			}
			if err := begunWith(f, path, headers); err != nil {
				return 0, err
			}
			if err := f.Truncate(keep); err != nil {
				return 0, fmt.Errorf("%s: cutting off its incomplete last line: %w", path, err)
			}
			return size - keep, nil
		}
		end = start
	}
	// no newline: the file is one cut line, at most a few KiB if a header
	if size > 1<<16 {
		return 0, nil
	}
	all := make([]byte, size)
	if _, err := f.ReadAt(all, 0); err != nil {
		return 0, fmt.Errorf("%s: reading it: %w", path, err)
	}
	started := len(bytes.Trim(all, "\x00")) == 0
	for _, h := range headers {
		started = started || strings.HasPrefix(h, string(all))
	}
	if !started {
		return 0, begunWith(f, path, headers)
	}
	if err := f.Truncate(0); err != nil {
		return 0, fmt.Errorf("%s: emptying its cut header: %w", path, err)
	}
	return size, nil
}

// begunWith says whether the file's first line is one of headers (each with its newline);
// nil where none are given.
func begunWith(f *os.File, path string, headers []string) error {
	if len(headers) == 0 {
		return nil
	}
	longest := 0
	for _, h := range headers {
		longest = max(longest, len(h))
	}
	buf := make([]byte, longest)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: reading its header: %w", path, err)
	}
	for _, h := range headers {
		if bytes.HasPrefix(buf[:n], []byte(h)) {
			return nil
		}
	}
	first, _, _ := bytes.Cut(buf[:n], []byte("\n"))
	return fmt.Errorf("%s: its first line %q is not a header this collector writes (%q), so it did not begin "+
		"this file and its rows would not fit it; move the file away or write to another", path, first,
		strings.TrimSuffix(headers[0], "\n"))
}
