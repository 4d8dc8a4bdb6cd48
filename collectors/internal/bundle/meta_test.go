package bundle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The repository's schema file and golden metas: the same ones the Python tests use.
func load(t *testing.T) *Schema {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "gmpanalysis", "bundle-meta.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func golden(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, pat := range []string{"../../../tests/data/meta/*.json", "../../../fixtures/runs/*/meta.json"} {
		files, _ := filepath.Glob(pat)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out[f] = b
		}
	}
	if len(out) < 3 {
		t.Fatalf("only %d golden metas", len(out))
	}
	return out
}

func TestGoldenMetasPass(t *testing.T) {
	s := load(t)
	for f, b := range golden(t) {
		if err := s.Check(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestBrokenMetasAreRefusedNamingTheKey(t *testing.T) {
	s := load(t)
	var base map[string]any
	for _, b := range golden(t) {
		if err := json.Unmarshal(b, &base); err != nil {
			t.Fatal(err)
		}
		break
	}
	for _, c := range []struct {
		key  string
		val  any
		want string
	}{
		{"period_us", 5, "period_us 5 is out of range"},
		{"quota_us", "50000", "quota_us must be integer or null"},
		{"source", "cron", "source must be one of"},
		{"cgroup_version", 3, "cgroup_version must be one of"},
		{"cgroup_paths", []any{1}, "cgroup_paths must hold strings"},
		{"complete", "yes", "complete must be boolean"},
		{"schema", 99, "schema must be one of"},
	} {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		m[c.key] = c.val
		b, _ := json.Marshal(m)
		if err := s.Check(b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%v: got %v, want %q", c.key, c.val, err, c.want)
		}
	}
	delete(base, "source")
	b, _ := json.Marshal(base)
	if err := s.Check(b); err == nil || !strings.Contains(err.Error(), `missing key "source"`) {
		t.Errorf("no source: %v", err)
	}
}
