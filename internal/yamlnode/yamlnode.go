// Package yamlnode reads yaml.v3 node trees: the bundle config and the
// manifest are read as nodes where the order of keys matters.
package yamlnode

import "go.yaml.in/yaml/v3"

// maxAliases bounds how many aliases Resolve follows, against a cycle.
const maxAliases = 100

// Resolve follows alias nodes to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxAliases; i++ {
		n = n.Alias
	}
	return n
}

// Value is the value under key in mapping n (aliases followed), or nil.
func Value(n *yaml.Node, key string) *yaml.Node {
	n = Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// Keys are mapping n's keys in the order written (aliases followed); nil
// when n is no mapping.
func Keys(n *yaml.Node) []string {
	n = Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	keys := make([]string, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys = append(keys, n.Content[i].Value)
	}
	return keys
}
