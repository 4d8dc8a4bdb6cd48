package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// v1CPUHierarchies are the directory names the cpu controller's v1 hierarchy is mounted
// under (alone, or joined with cpuacct); v1AcctHierarchies the same for cpuacct.
var (
	v1CPUHierarchies  = []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"}
	v1AcctHierarchies = []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"}
)

// Mount is a cgroup mount root and where the cpu controller lives under it.
//
// The rule: v2 when the root's cgroup.controllers lists cpu; otherwise v1 when one of
// cpu/, cpu,cpuacct/, cpuacct,cpu/ is a directory. The cpu controller is bound to one
// hierarchy only, so a hybrid host (v1 hierarchies beside a cgroup2 mount without cpu, as
// here) is v1, as it is for the Go runtime. On v1 the cpuacct hierarchy is the first of
// cpuacct/, cpu,cpuacct/, cpuacct,cpu/ that is a directory, else the cpu hierarchy itself.
type Mount struct {
	Root    string
	Version int    // 1 or 2
	CPU     string // v1: the cpu hierarchy's root directory; v2: Root
	Acct    string // v1: the cpuacct hierarchy's root directory; v2: ""
}

// ErrNoController: the mount has no cpu controller (errors.Is).
var ErrNoController = errors.New("no cgroup cpu controller")

// readSmall reads a small interface file (one page at most: the kernel formats these
// into one), refusing anything that is not a regular file (openRegular), so /dev/zero or a
// FIFO in its place neither hangs nor fills memory.
func readSmall(p string) ([]byte, error) {
	f, err := openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 4097)
	n, err := io.ReadFull(f, buf)
	if err == nil {
		return nil, &FileError{Path: p, Reason: "larger than 4096 bytes"}
	}
	if err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, &FileError{Path: p, Reason: "read failed (" + err.Error() + ")", Err: err}
	}
	return buf[:n], nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// Detect finds the cpu controller under the cgroup mount root.
func Detect(root string) (Mount, error) {
	if b, err := readSmall(filepath.Join(root, "cgroup.controllers")); err == nil {
		for _, c := range strings.Fields(string(b)) {
			if c == "cpu" {
				return Mount{Root: root, Version: 2, CPU: root}, nil
			}
		}
	}
	for _, h := range v1CPUHierarchies {
		cpu := filepath.Join(root, h)
		if !isDir(cpu) {
			continue
		}
		m := Mount{Root: root, Version: 1, CPU: cpu, Acct: cpu}
		for _, a := range v1AcctHierarchies {
			if d := filepath.Join(root, a); isDir(d) {
				m.Acct = d
				break
			}
		}
		return m, nil
	}
	return Mount{}, fmt.Errorf("%w under %s: neither a v2 mount listing cpu in %s nor a v1 cpu hierarchy (%s); "+
		"check that --root points at the cgroup mount", ErrNoController, root,
		filepath.Join(root, "cgroup.controllers"), filepath.Join(root, "cpu"))
}

// Cgroup is one cgroup that exists under a Mount: the files a sampler reads.
type Cgroup struct {
	Rel       string // relative to the hierarchy root, cleaned ("" = the root cgroup)
	Version   int
	Dir       string // holds cpu.stat and the limit files (v1: in the cpu hierarchy)
	StatPath  string // cpu.stat
	UsagePath string // v1 only: cpuacct.usage (ns) in the cpuacct hierarchy; v2 reads usage_usec
}

// CleanRel cleans a cgroup path relative to a hierarchy root; it cannot climb out of it.
func CleanRel(rel string) string {
	return strings.TrimPrefix(path.Clean("/"+rel), "/")
}

// file checks that p is a regular file: (true, nil) if so, (false, nil) if it does not
// exist, and an error if something else is there (a directory where the file should be).
func file(p, what string) (bool, error) {
	var st unix.Stat_t
	err := unix.Stat(p, &st)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &FileError{Path: p, Reason: "cannot be examined (" + err.Error() + ")", Err: err, What: what}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, &FileError{Path: p, Reason: "is " + fileKind(st.Mode), What: what}
	}
	return true, nil
}

// NotExistError says why a cgroup does not exist; errors.Is(err, fs.ErrNotExist).
type NotExistError struct{ Reason string }

func (e *NotExistError) Error() string { return e.Reason }
func (e *NotExistError) Unwrap() error { return fs.ErrNotExist }

// Lookup applies the one rule for "cgroup rel exists": every file the sampler reads is a
// regular file — v1: cpu.stat in the cpu hierarchy and cpuacct.usage in the cpuacct
// hierarchy; v2: cpu.stat. A missing file is a *NotExistError; anything else in the
// file's place is a plain error (the tree is not what the kernel makes).
func (m Mount) Lookup(rel string) (*Cgroup, error) {
	rel = CleanRel(rel)
	c := &Cgroup{Rel: rel, Version: m.Version, Dir: filepath.Join(m.CPU, rel)}
	c.StatPath = filepath.Join(c.Dir, "cpu.stat")
	ok, err := file(c.StatPath, "cpu.stat")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &NotExistError{fmt.Sprintf("no cpu.stat under %s (looked for %s)", m.Root, c.StatPath)}
	}
	if m.Version == 1 {
		c.UsagePath = filepath.Join(m.Acct, rel, "cpuacct.usage")
		ok, err := file(c.UsagePath, "cpuacct.usage")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &NotExistError{fmt.Sprintf("found v1 %s but no %s: create the cgroup in the cpuacct hierarchy too",
				c.StatPath, c.UsagePath)}
		}
	}
	return c, nil
}

// Target is one --cgroup argument resolved: a name and the cgroup that exists.
type Target struct {
	Name string // label for the sampler's `cgroup` column
	*Cgroup
}

// SplitSpec splits a --cgroup argument "[NAME=]PATH[|PATH...]" into its name ("" if not
// given) and its alternatives (a collector that cannot see the node's tree passes every
// layout the kubelet may use).
func SplitSpec(spec string) (name string, alts []string) {
	rels := spec
	if i := strings.IndexByte(spec, '='); i >= 0 {
		name, rels = spec[:i], spec[i+1:]
	}
	return name, strings.Split(rels, "|")
}

// Resolve resolves a --cgroup argument under mount m: the first alternative that exists
// (Lookup) wins. A "kube-container:UID:QOS:ID" or "kube-pod:UID:QOS" argument stands for
// every layout the kubelet may give that container or pod (ExpandKube), also under a
// kubelet --cgroup-root found at the top of the tree (KubeletRoots). The name defaults to
// that alternative's cleaned path ("/" for the root).
func (m Mount) Resolve(spec string) (*Target, error) {
	name, alts := SplitSpec(spec)
	if len(alts) == 1 && strings.HasPrefix(alts[0], KubePrefix) {
		var err error
		if alts, err = ExpandKube(alts[0]); err != nil {
			return nil, fmt.Errorf("cgroup %q: %w", spec, err)
		}
		// a kubelet with its own --cgroup-root (kind runs it under kubelet.slice)
		base := alts
		for _, root := range KubeletRoots(m.CPU) {
			for _, a := range base {
				if u := UnderKubeletRoot(a, root); u != "" {
					alts = append(alts, u)
				}
			}
		}
	}
	var firstErr error
	for _, rel := range alts {
		c, err := m.Lookup(rel)
		if err == nil {
			if name == "" {
				name = c.Rel
				if name == "" {
					name = "/"
				}
			}
			return &Target{Name: name, Cgroup: c}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cgroup %q: %w", spec, err)
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if len(alts) > 1 {
		return nil, &NotExistError{fmt.Sprintf("cgroup %q: none of the %d alternatives exists under %s (cgroup v%d)",
			spec, len(alts), m.Root, m.Version)}
	}
	return nil, &NotExistError{fmt.Sprintf("cgroup %q: %v (cgroup v%d); check the path and that --root points "+
		"at the cgroup mount", spec, firstErr, m.Version)}
}

// ProcCgroupPath returns, from the text of /proc/<pid>/cgroup, the process's cgroup path
// for the cpu controller (v1) or its unified path (v2); "" if absent.
func ProcCgroupPath(data []byte, version int) string {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if version == 2 && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if version == 1 {
			for _, c := range strings.Split(parts[1], ",") {
				if c == "cpu" {
					return parts[2]
				}
			}
		}
	}
	return ""
}

// SelfPath is ProcCgroupPath of this process ("" if /proc/self/cgroup cannot be read).
func SelfPath(version int) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	return ProcCgroupPath(b, version)
}

// Contains says whether the cgroup at rel contains the cgroup at self (both relative to
// the same hierarchy root; self may carry a leading "/"). "" and "/" for self mean the
// root or a cgroup namespace's root: nothing to compare against, so false.
func Contains(rel, self string) bool {
	if self == "" || self == "/" {
		return false
	}
	self, rel = CleanRel(self), CleanRel(rel)
	return rel == "" || self == rel || strings.HasPrefix(self, rel+"/")
}
