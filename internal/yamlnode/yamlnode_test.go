package yamlnode

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestValueAndKeysFollowAliases(t *testing.T) {
	var doc yaml.Node
	src := "base: &b {x: 1, y: 2}\nalias: *b\nlist: [1]\n"
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	root := doc.Content[0]
	if got := strings.Join(Keys(root), ","); got != "base,alias,list" {
		t.Errorf("Keys: %s", got)
	}
	if v := Value(Value(root, "alias"), "y"); v == nil || v.Value != "2" {
		t.Errorf("a value under an alias: %v", v)
	}
	if Value(root, "missing") != nil || Value(Value(root, "list"), "x") != nil || Keys(Value(root, "list")) != nil || Value(nil, "x") != nil {
		t.Error("a missing key, or a node that is no mapping, has no value and no keys")
	}
}
