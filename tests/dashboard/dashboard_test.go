// Package dashboard checks the chart's Grafana dashboard against the dashboard schema that
// Grafana publishes as code (grafana-foundation-sdk, generated from Grafana's own schema
// kinds): strict decoding rejects unknown fields, fields of the wrong type and missing
// required fields, in the dashboard, its variables, its panels and, through the registered
// panel and query plugins, each panel's options and each Prometheus query.
package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

var file = filepath.Join("..", "..", "charts", "gmpanalysis", "dashboards", "gmpanalysis.json")

func init() { plugins.RegisterDefaultPlugins() }

// check decodes raw as Grafana's dashboard schema (strict) and validates its constraints.
func check(raw []byte) (dashboard.Dashboard, error) {
	var d dashboard.Dashboard
	if err := real(d.UnmarshalJSONStrict(raw)); err != nil {
		return d, err
	}
	return d, real(d.Validate())
}

// real drops the empty error list some generated decoders return in place of nil (a nil
// cog.BuildErrors in an error interface is not a nil error).
func real(err error) error {
	var list cog.BuildErrors
	if errors.As(err, &list) && len(list) == 0 {
		return nil
	}
	return err
}

func TestDashboardMatchesGrafanaSchema(t *testing.T) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := check(raw); err != nil {
		t.Fatalf("%s does not match Grafana's dashboard schema: %v", file, err)
	}
	var plain struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &plain); err != nil {
		t.Fatal(err)
	}
	if len(plain.Panels) == 0 {
		t.Fatal("no panels")
	}
	// The dashboard's decoder checks each panel's options and queries with the plugin
	// registered for the panel's type and the query's datasource; where no plugin is
	// registered it takes any map. Both plugins must be there, and take what we wrote.
	for i, rawPanel := range plain.Panels {
		var p struct {
			Type       string                `json:"type"`
			Datasource struct{ Type string } `json:"datasource"`
			Options    json.RawMessage       `json:"options"`
			Targets    []json.RawMessage     `json:"targets"`
		}
		if err := json.Unmarshal(rawPanel, &p); err != nil {
			t.Fatal(err)
		}
		cfg, found := cog.ConfigForPanelcfgVariant(p.Type)
		if !found || cfg.StrictOptionsUnmarshaler == nil {
			t.Fatalf("panels[%d]: no schema for panel type %q", i, p.Type)
		}
		if _, err := cfg.StrictOptionsUnmarshaler(p.Options); real(err) != nil {
			t.Errorf("panels[%d].options: %v", i, err)
		}
		if p.Datasource.Type != "prometheus" || len(p.Targets) == 0 {
			t.Errorf("panels[%d]: datasource %q, %d queries: want Prometheus queries", i, p.Datasource.Type, len(p.Targets))
		}
		for j, q := range p.Targets {
			if _, err := prometheus.VariantConfig().StrictDataqueryUnmarshaler(q); real(err) != nil {
				t.Errorf("panels[%d].targets[%d]: %v", i, j, err)
			}
		}
	}
}

// The check can fail: each mutation below is one a hand edit of the JSON can make.
func TestSchemaCheckRejectsMutations(t *testing.T) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// each mutation, and the place the error must name
	type mutation struct {
		place  string
		mutate func(map[string]any)
	}
	mutations := map[string]mutation{
		"unknown dashboard field": {"panelz", func(d map[string]any) { d["panelz"] = []any{} }},
		"title of the wrong type": {"title", func(d map[string]any) { d["title"] = 7 }},
		"unknown panel option": {"panels[0].options.Options: unexpected field 'legendd'", func(d map[string]any) {
			panel(d)["options"].(map[string]any)["legendd"] = map[string]any{}
		}},
		"panel option of the wrong type": {"panels[0].options.legend", func(d map[string]any) {
			panel(d)["options"].(map[string]any)["legend"] = "bottom"
		}},
		"unknown query field": {"panels[0].targets[0].Dataquery: unexpected field 'exprr'", func(d map[string]any) {
			panel(d)["targets"].([]any)[0].(map[string]any)["exprr"] = "up"
		}},
		"panel without a type": {"panels[0]", func(d map[string]any) { delete(panel(d), "type") }},
		"variable without a name": {"templating.list[1]", func(d map[string]any) {
			delete(d["templating"].(map[string]any)["list"].([]any)[1].(map[string]any), "name")
		}},
	}
	for name, m := range mutations {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			var d map[string]any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&d); err != nil {
				t.Fatal(err)
			}
			m.mutate(d)
			out, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			_, err = check(out)
			if err == nil {
				t.Fatalf("the schema check accepted a dashboard with %s", name)
			}
			if !strings.Contains(err.Error(), m.place) {
				t.Fatalf("%s: the error does not name %s: %v", name, m.place, err)
			}
		})
	}
}

func panel(d map[string]any) map[string]any { return d["panels"].([]any)[0].(map[string]any) }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
