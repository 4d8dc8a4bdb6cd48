package cgroup

import "errors"

// ErrorFacts is an error of this package as a JSON fact, for a collector that reads the
// sampler's summary (Go and Python exchange facts as JSON, never by parsing prose):
// gmpanalysis turns kinds "format" and "file" into a CgroupFormatError.
type ErrorFacts struct {
	// "format": content the kernel does not write (*FormatError); "file": something other
	// than a readable regular file in an interface file's place (*FileError); "gone": a
	// read failed, the cgroup was removed (*GoneError); "not_exist": no such cgroup
	// (*NotExistError); "other": anything else (a bad flag, an output that cannot be opened).
	Kind    string `json:"kind"`
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`   // format: 1-based
	Reason  string `json:"reason,omitempty"` // format and file: what was expected / found
	Message string `json:"message"`          // err.Error(): names the file, quotes the line escaped
}

// Facts describes err for the JSON summary; nil for a nil error.
func Facts(err error) *ErrorFacts {
	if err == nil {
		return nil
	}
	f := &ErrorFacts{Kind: "other", Message: err.Error()}
	var (
		fe *FormatError
		fi *FileError
		ge *GoneError
		ne *NotExistError
	)
	switch {
	case errors.As(err, &fe):
		f.Kind, f.Path, f.Line, f.Reason = "format", fe.Path, fe.Line, fe.Reason
	case errors.As(err, &fi):
		f.Kind, f.Path, f.Reason = "file", fi.Path, fi.Reason
	case errors.As(err, &ge):
		f.Kind, f.Path = "gone", ge.Path
	case errors.As(err, &ne):
		f.Kind = "not_exist"
	}
	return f
}
