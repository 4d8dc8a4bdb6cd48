package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDropCutLine(t *testing.T) {
	long := "h\n" + strings.Repeat("1,2,3\n", 2000) // the cut line's start lies more than one read back
	for _, c := range []struct {
		name, before, after string
		cut                 int64
	}{
		{"whole", "a,b\n1,2\n", "a,b\n1,2\n", 0},
		{"cut-row", "a,b\n1,2\n3,", "a,b\n1,2\n", 2},
		{"cut-first-row", "a,b\n12", "a,b\n", 2},
		{"cut-header", "a,b", "a,b", 0}, // not a header of this writer's: left to its header check
		{"cut-own-header", "h1,h", "", 4},
		{"zeros", "\x00\x00\x00\x00", "", 4},
		{"empty", "", "", 0},
		{"long-cut-row", long + strings.Repeat("9", 5000), long, 5000},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.csv")
			if err := os.WriteFile(p, []byte(c.before), 0o644); err != nil {
				t.Fatal(err)
			}
			n, err := DropCutLine(p, "h1,h2\n", "h1,h2,h3\n")
			b, _ := os.ReadFile(p)
			if err != nil || n != c.cut || string(b) != c.after {
				t.Fatalf("cut %d (%v), file %q; want %d, %q", n, err, b, c.cut, c.after)
			}
		})
	}
	if n, err := DropCutLine(filepath.Join(t.TempDir(), "absent.csv")); n != 0 || err != nil {
		t.Fatalf("absent file: %d, %v", n, err)
	}
}
