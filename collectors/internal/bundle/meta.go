// Package bundle holds the run-bundle contract for Go writers: meta.json is checked against
// the JSON Schema the Python library generates from its one owner of the fields
// (gmpanalysis/schema.py -> gmpanalysis/bundle-meta.schema.json), so a Go collector that
// writes bundles cannot drift from the reader.
package bundle

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// Schema is the subset of JSON Schema the bundle contract uses.
type Schema struct {
	Required   []string            `json:"required"`
	Properties map[string]Property `json:"properties"`
}

// Property is one meta.json key: its JSON type(s), allowed values, integer range, item type.
type Property struct {
	Type    any      `json:"type"` // "integer" or ["integer", "null"]
	Enum    []any    `json:"enum"`
	Minimum *float64 `json:"minimum"`
	Maximum *float64 `json:"maximum"`
	Items   *struct {
		Type string `json:"type"`
	} `json:"items"`
}

// ParseSchema reads the schema file's bytes.
func ParseSchema(data []byte) (*Schema, error) {
	var s Schema
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("bundle schema: %w", err)
	}
	if len(s.Properties) == 0 {
		return nil, fmt.Errorf("bundle schema: no properties")
	}
	return &s, nil
}

func (p Property) types() []string {
	switch t := p.Type.(type) {
	case string:
		return []string{t}
	case []any:
		out := make([]string, 0, len(t))
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// jsonType names the JSON type of a decoded value (numbers with no fraction are integers).
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func typeOK(v any, allowed []string) bool {
	t := jsonType(v)
	for _, a := range allowed {
		if a == t || (a == "number" && t == "integer") {
			return true
		}
	}
	return false
}

// Check checks meta.json bytes against the schema; the error names the key and the rule.
// Unknown keys are allowed (a newer writer's facts survive an older reader).
func (s *Schema) Check(meta []byte) error {
	dec := json.NewDecoder(strings.NewReader(string(meta)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("meta.json: %w", err)
	}
	for _, k := range s.Required {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("meta.json: missing key %q", k)
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p, known := s.Properties[k]
		if !known {
			continue
		}
		v := m[k]
		if !typeOK(v, p.types()) {
			return fmt.Errorf("meta.json: %s must be %s, got %s", k, strings.Join(p.types(), " or "), jsonType(v))
		}
		if p.Enum != nil && !inEnum(v, p.Enum) {
			return fmt.Errorf("meta.json: %s must be one of %v, got %v", k, p.Enum, v)
		}
		if n, ok := v.(json.Number); ok {
			f, _ := n.Float64()
			if (p.Minimum != nil && f < *p.Minimum) || (p.Maximum != nil && f > *p.Maximum) {
				return fmt.Errorf("meta.json: %s %v is out of range", k, n)
			}
		}
		if arr, ok := v.([]any); ok && p.Items != nil {
			for _, x := range arr {
				if !typeOK(x, []string{p.Items.Type}) {
					return fmt.Errorf("meta.json: %s must hold %ss, got %s", k, p.Items.Type, jsonType(x))
				}
			}
		}
	}
	return nil
}

func inEnum(v any, enum []any) bool {
	for _, e := range enum {
		switch ev := e.(type) {
		case nil:
			if v == nil {
				return true
			}
		case float64:
			if n, ok := v.(json.Number); ok {
				if f, err := n.Float64(); err == nil && math.Abs(f-ev) == 0 {
					return true
				}
			}
		default:
			if v == e {
				return true
			}
		}
	}
	return false
}
