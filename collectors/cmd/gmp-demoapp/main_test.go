package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goLine returns the go directive of a go.mod file.
func goLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			return v
		}
	}
	t.Fatalf("%s: no go line", path)
	return ""
}

// TestVariantGoLines: how the runtime picks GOMAXPROCS is decided by the main module's go
// line (its DefaultGODEBUG), so the builds must keep theirs: the go124 variant at 1.24
// (containermaxprocs=0, updatemaxprocs=0: NumCPU), the demo app module no higher than
// any module that builds it.
func TestVariantGoLines(t *testing.T) {
	root := filepath.Join("..", "..")
	if v := goLine(t, filepath.Join(root, "variants", "go124", "go.mod")); v != "1.24" && !strings.HasPrefix(v, "1.24.") {
		t.Errorf("variants/go124 says go %s: the Go 1.24 GOMAXPROCS defaults need a 1.24 line", v)
	}
	if v := goLine(t, filepath.Join(root, "demoapp", "go.mod")); v != "1.24" && !strings.HasPrefix(v, "1.24.") {
		t.Errorf("demoapp says go %s: a dependency's go line must not exceed the go124 variant's", v)
	}
	for _, m := range []string{"go.mod", "variants/automaxprocs/go.mod"} {
		if v := goLine(t, filepath.Join(root, m)); v == "1.24" || strings.HasPrefix(v, "1.24.") || v < "1.24" {
			t.Errorf("%s says go %s: want >= 1.25 (the container-aware GOMAXPROCS defaults)", m, v)
		}
	}
}
