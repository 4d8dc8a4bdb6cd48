package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDropCutLine(t *testing.T) {
	long := "h1,h2\n" + strings.Repeat("1,2\n", 3000) // the cut line's start lies more than one read back
	for _, c := range []struct {
		name, before, after string
		cut                 int64
	}{
		{"whole", "h1,h2\n1,2\n", "h1,h2\n1,2\n", 0},
		{"cut-row", "h1,h2\n1,2\n3,", "h1,h2\n1,2\n", 2},
		{"cut-first-row", "h1,h2,h3\n12", "h1,h2,h3\n", 2},
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

// A file this writer did not begin (its first line none of its headers) is refused, with or
// without a cut line, and left as it was.
func TestDropCutLineRefusesAForeignFile(t *testing.T) {
	for _, before := range []string{"a,b", "a,b\n1,2\n", "a,b\n1,2\n3,", "h1,h2,h3,h4\n1\n", "\n1,2\n"} {
		p := filepath.Join(t.TempDir(), "x.csv")
		if err := os.WriteFile(p, []byte(before), 0o644); err != nil {
			t.Fatal(err)
		}
		n, err := DropCutLine(p, "h1,h2\n", "h1,h2,h3\n")
		b, _ := os.ReadFile(p)
		if err == nil || !strings.Contains(err.Error(), "not a header this collector writes") || n != 0 ||
			string(b) != before {
			t.Fatalf("%q: cut %d, %v, file %q; want it refused and kept", before, n, err, b)
		}
	}
}
