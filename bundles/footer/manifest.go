package footer

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/airflow-sandbox/airflow-go-worker/internal/yamlnode"
)

// MetadataVersion is the airflow_bundle_metadata_version this package writes.
const MetadataVersion = "1.0"

// Manifest is a bundle's metadata (spec 2.3). Known keys are typed; every
// other key is kept in the Extra maps so that reading and re-rendering a
// manifest loses nothing (consumers must ignore unknown keys, not drop them).
type Manifest struct {
	MetadataVersion string         // airflow_bundle_metadata_version
	SDK             SDK            // sdk
	Source          string         // source: display name of the source region
	Dags            map[string]Dag // dags: dag_id -> tasks
	Digests         Digests        // digests
	// Sources and EntrypointPath are the Gen C source index (spec 2.3):
	// where each file of the source region lies, the entrypoint first.
	// Airflow 3.3's reader ignores them; Airflow's Go SDK's inspect
	// --source needs them to show a bundle's source.
	Sources        []SourceFile   // sources
	EntrypointPath string         // entrypoint_path: one of Sources' paths
	Extra          map[string]any // unknown top-level keys
}

// SDK is the manifest's sdk mapping.
type SDK struct {
	Language                string
	Version                 string
	SupervisorSchemaVersion string
	Extra                   map[string]any
}

// Dag is one entry of the manifest's dags mapping. Tasks keep the order the
// executable registered them in.
type Dag struct {
	Tasks []string
	Extra map[string]any
}

// SourceFile is one file of the source region.
type SourceFile struct {
	Path   string // a slash path, unique in the index
	Offset int64  // from the start of the source region
	Length int64
	SHA256 string // lower-case hex of the file's bytes
}

// Digests is the manifest's optional digests mapping.
type Digests struct {
	Integrity string // lower-case hex SHA-256 of the binary region
	Cache     string // changes whenever binary, source or manifest change
	Extra     map[string]any
}

// DagIDs returns the dag ids in sorted order, the order the manifest renders them in.
func (m Manifest) DagIDs() []string {
	ids := make([]string, 0, len(m.Dags))
	for id := range m.Dags {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// ToMap returns the manifest as plain maps, lists and scalars (for JSON
// output). Known fields override same-named Extra keys; empty known strings
// are left out.
func (m Manifest) ToMap() map[string]any {
	out := copyMap(m.Extra)
	putString(out, "airflow_bundle_metadata_version", m.MetadataVersion)
	sdk := copyMap(m.SDK.Extra)
	putString(sdk, "language", m.SDK.Language)
	putString(sdk, "version", m.SDK.Version)
	putString(sdk, "supervisor_schema_version", m.SDK.SupervisorSchemaVersion)
	out["sdk"] = sdk
	putString(out, "source", m.Source)
	if m.Dags != nil {
		dags := make(map[string]any, len(m.Dags))
		for id, d := range m.Dags {
			entry := copyMap(d.Extra)
			tasks := make([]any, len(d.Tasks))
			for i, t := range d.Tasks {
				tasks[i] = t
			}
			entry["tasks"] = tasks
			dags[id] = entry
		}
		out["dags"] = dags
	}
	if len(m.Sources) > 0 {
		files := make([]any, len(m.Sources))
		for i, f := range m.Sources {
			files[i] = map[string]any{"path": f.Path, "offset": f.Offset, "length": f.Length, "sha256": f.SHA256}
		}
		out["sources"] = files
	}
	putString(out, "entrypoint_path", m.EntrypointPath)
	dig := copyMap(m.Digests.Extra)
	putString(dig, "integrity", m.Digests.Integrity)
	putString(dig, "cache", m.Digests.Cache)
	if len(dig) > 0 {
		out["digests"] = dig
	}
	return out
}

// Encode renders the manifest as --airflow-metadata prints it: "yaml" (the
// default; Render) or "json" (4-space indent plus newline, as Airflow's Go
// SDK prints it).
func (m Manifest) Encode(format string) ([]byte, error) {
	switch format {
	case "", "yaml":
		return m.Render()
	case "json":
		out, err := json.MarshalIndent(m.ToMap(), "", "    ")
		if err != nil {
			return nil, err
		}
		return append(out, '\n'), nil
	}
	return nil, fmt.Errorf("unknown --format %q: use yaml or json", format)
}

// Render returns the manifest as deterministic YAML: sorted keys, 2-space
// indent, every string value double-quoted so that "123" or "true" stay
// strings for yaml.safe_load (spec 2.3).
func (m Manifest) Render() ([]byte, error) { return RenderYAML(m.ToMap()) }

// RenderYAML renders any map of plain values (maps, slices, strings,
// numbers, bools, nil) the way manifests are rendered: sorted keys, 2-space
// indent, double-quoted strings.
func RenderYAML(v map[string]any) ([]byte, error) {
	var b strings.Builder
	if err := emitMap(&b, v, 0); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// ParseManifest decodes a manifest read from a bundle and checks it the way
// Airflow's coordinator does: UTF-8, a YAML mapping, sdk.supervisor_schema_version
// a non-empty string, dags a mapping keyed by string dag ids.
func ParseManifest(data []byte) (Manifest, error) { return decodeManifest(data, true) }

// DecodeManifest decodes what an executable prints for --airflow-metadata
// (YAML or JSON). It is lenient where the packer will fill in or override a
// value: the schema version may be missing, and scalars are taken as written.
func DecodeManifest(data []byte) (Manifest, error) { return decodeManifest(data, false) }

func decodeManifest(data []byte, strict bool) (Manifest, error) {
	var m Manifest
	if !utf8.Valid(data) {
		return m, errors.New("metadata is not valid UTF-8")
	}
	if err := checkManifestSize(data); err != nil {
		return m, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return m, fmt.Errorf("metadata is not valid YAML: %v", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return m, errors.New("metadata is empty; it must be a YAML mapping")
	}
	root := resolveAlias(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return m, fmt.Errorf("metadata is a YAML %s, not a mapping", kindName(root))
	}
	if err := checkSafeTags(root); err != nil {
		return m, err
	}
	// Everything below walks the document with its aliases expanded; bound
	// that expansion once, for the whole document, before any of it runs.
	if err := checkAliasExpansion(root); err != nil {
		return m, err
	}
	var sawSDK, sawDags bool
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i].Value, resolveAlias(root.Content[i+1])
		var err error
		switch key {
		case "airflow_bundle_metadata_version":
			m.MetadataVersion, err = scalarText(val, key)
		case "source":
			m.Source, err = scalarText(val, key)
		case "sdk":
			sawSDK = true
			m.SDK, err = decodeSDK(val)
		case "dags":
			sawDags = true
			m.Dags, err = decodeDags(val, strict)
		case "digests":
			m.Digests, err = decodeDigests(val)
		case "sources":
			m.Sources, err = decodeSources(val)
		case "entrypoint_path":
			m.EntrypointPath, err = scalarText(val, key)
		default:
			var v any
			if v, err = nodeToAny(val); err == nil {
				if m.Extra == nil {
					m.Extra = map[string]any{}
				}
				m.Extra[key] = v
			}
		}
		if err != nil {
			return m, err
		}
	}
	if !strict {
		return m, nil
	}
	if !sawSDK {
		return m, errors.New("metadata has no sdk mapping; Airflow needs sdk.supervisor_schema_version")
	}
	if m.SDK.SupervisorSchemaVersion == "" {
		return m, errors.New("sdk.supervisor_schema_version is missing or empty; Airflow rejects the bundle without it (pack again with --supervisor-schema-version)")
	}
	if v := yamlnode.Value(resolveAlias(yamlnode.Value(root, "sdk")), "supervisor_schema_version"); v != nil && resolveAlias(v).ShortTag() != "!!str" {
		return m, fmt.Errorf("sdk.supervisor_schema_version is a YAML %s, not a string; quote it (\"%s\") so yaml.safe_load reads a string", resolveAlias(v).ShortTag(), m.SDK.SupervisorSchemaVersion)
	}
	if !sawDags {
		return m, errors.New("metadata has no dags mapping, so the coordinator will never choose this bundle for any dag")
	}
	return m, nil
}

func decodeSDK(n *yaml.Node) (SDK, error) {
	var s SDK
	if n.ShortTag() == "!!null" {
		return s, nil
	}
	if n.Kind != yaml.MappingNode {
		return s, fmt.Errorf("sdk is a YAML %s, not a mapping", kindName(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, resolveAlias(n.Content[i+1])
		var err error
		switch key {
		case "language":
			s.Language, err = scalarText(val, "sdk.language")
		case "version":
			s.Version, err = scalarText(val, "sdk.version")
		case "supervisor_schema_version":
			s.SupervisorSchemaVersion, err = scalarText(val, "sdk.supervisor_schema_version")
		default:
			err = putExtra(&s.Extra, key, val)
		}
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

func decodeDags(n *yaml.Node, strict bool) (map[string]Dag, error) {
	dags := map[string]Dag{}
	if n.ShortTag() == "!!null" && !strict {
		return dags, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("dags is a YAML %s, not a mapping of dag_id to {tasks: [...]}", kindName(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolveAlias(n.Content[i])
		id := k.Value
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("dags has a %s as a key; dag ids must be strings", kindName(k))
		}
		if strict && k.ShortTag() != "!!str" {
			return nil, fmt.Errorf("dag id %s is a YAML %s, not a string, so Airflow will never match it; quote it", id, k.ShortTag())
		}
		if _, dup := dags[id]; dup {
			return nil, fmt.Errorf("dag %q is listed twice under dags", id)
		}
		d, err := decodeDag(id, resolveAlias(n.Content[i+1]))
		if err != nil {
			return nil, err
		}
		dags[id] = d
	}
	return dags, nil
}

func decodeDag(id string, n *yaml.Node) (Dag, error) {
	var d Dag
	if n.ShortTag() == "!!null" {
		return d, nil
	}
	if n.Kind != yaml.MappingNode {
		return d, fmt.Errorf("dags.%s is a YAML %s, not a mapping with a tasks list", id, kindName(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, resolveAlias(n.Content[i+1])
		if key != "tasks" {
			if err := putExtra(&d.Extra, key, val); err != nil {
				return d, err
			}
			continue
		}
		if val.ShortTag() == "!!null" {
			continue
		}
		if val.Kind != yaml.SequenceNode {
			return d, fmt.Errorf("dags.%s.tasks is a YAML %s, not a list of task ids", id, kindName(val))
		}
		for j, t := range val.Content {
			name, err := scalarText(resolveAlias(t), fmt.Sprintf("dags.%s.tasks[%d]", id, j))
			if err != nil {
				return d, err
			}
			d.Tasks = append(d.Tasks, name)
		}
	}
	return d, nil
}

func decodeDigests(n *yaml.Node) (Digests, error) {
	var g Digests
	if n.ShortTag() == "!!null" {
		return g, nil
	}
	if n.Kind != yaml.MappingNode {
		return g, fmt.Errorf("digests is a YAML %s, not a mapping", kindName(n))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, resolveAlias(n.Content[i+1])
		var err error
		switch key {
		case "integrity":
			g.Integrity, err = scalarText(val, "digests.integrity")
		case "cache":
			g.Cache, err = scalarText(val, "digests.cache")
		default:
			err = putExtra(&g.Extra, key, val)
		}
		if err != nil {
			return g, err
		}
	}
	return g, nil
}

// decodeSources reads the Gen C source index: a list of {path, offset,
// length, sha256}.
func decodeSources(n *yaml.Node) ([]SourceFile, error) {
	if n.ShortTag() == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("sources is a YAML %s, not a list of {path, offset, length, sha256}", kindName(n))
	}
	files := make([]SourceFile, 0, len(n.Content))
	for i, e := range n.Content {
		e = resolveAlias(e)
		if e.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("sources[%d] is a YAML %s, not a mapping of path, offset, length, sha256", i, kindName(e))
		}
		var f SourceFile
		for j := 0; j+1 < len(e.Content); j += 2 {
			key, val := e.Content[j].Value, resolveAlias(e.Content[j+1])
			field := fmt.Sprintf("sources[%d].%s", i, key)
			var err error
			switch key {
			case "path":
				f.Path, err = scalarText(val, field)
			case "sha256":
				f.SHA256, err = scalarText(val, field)
			case "offset":
				f.Offset, err = intValue(val, field)
			case "length":
				f.Length, err = intValue(val, field)
			}
			if err != nil {
				return nil, err
			}
		}
		files = append(files, f)
	}
	return files, nil
}

func intValue(n *yaml.Node, field string) (int64, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, fmt.Errorf("%s is a YAML %s, not an integer", field, kindName(n))
	}
	v, err := strconv.ParseInt(n.Value, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", field, err)
	}
	return v, nil
}

func putExtra(dst *map[string]any, key string, val *yaml.Node) error {
	v, err := nodeToAny(val)
	if err != nil {
		return err
	}
	if *dst == nil {
		*dst = map[string]any{}
	}
	(*dst)[key] = v
	return nil
}

// scalarText returns a scalar's text as written; null is "".
func scalarText(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("%s is a YAML %s, not a string", field, kindName(n))
	}
	if n.ShortTag() == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

// Bounds on a manifest before it is parsed, so that reading one (which
// every task start does, for its bundle's own) stays small whatever the
// bundle holds. The YAML parser keeps the whole document as nodes of some
// 300 bytes each (a 3.8 MB manifest of bare keys in a flow mapping took
// 332 MB of RSS). So a manifest over MaxManifestSize is refused unread, and
// what can start a value (a separator, an indicator, a line; a comma twice,
// since a bare key in a flow mapping is a key and a null value) is counted
// and the document refused above maxManifestValues of them, before
// anything is parsed: the worst document within both grows the heap by
// about 36 MiB, to a peak RSS under 50 MiB (TestCraftedManifestsStaySmall). A manifest as pack renders
// it spends 4 of them per Dag and 2 per task, so some 12,000 Dags of 3
// tasks fit; a bundle that needs more splits into several bundles.
const (
	maxManifestValues = 120_000
	MaxManifestSize   = 2 << 20
)

func checkManifestSize(data []byte) error {
	if len(data) > MaxManifestSize {
		return fmt.Errorf("metadata is %d bytes, over the %d-byte limit; a manifest lists a bundle's Dags and tasks and is far smaller: split the bundle, or keep large values out of its metadata", len(data), MaxManifestSize)
	}
	n := 1
	for _, c := range data {
		switch c {
		case ',':
			n += 2
		case ':', '-', '[', '{', '\n', '*', '?':
			n++
		}
	}
	if n > maxManifestValues {
		return fmt.Errorf("metadata holds up to %d YAML values, over the limit of %d (about 12,000 Dags of 3 tasks); a manifest lists a bundle's Dags and tasks: split the bundle into several, or keep long lists out of its metadata", n, maxManifestValues)
	}
	return nil
}

// Limits on unknown values, so a hostile manifest (a recursive alias, or
// aliases that expand exponentially) gives an error, not a hang or a crash.
const (
	maxValueDepth = 64
	maxValueNodes = 100_000
	// maxAliasExpansion bounds what aliases add to the whole document,
	// task lists and every Extra value together, in nodes (a scalar counts
	// one more per 64 bytes). A manifest we render has no aliases at all.
	maxAliasExpansion = 100_000
)

// checkAliasExpansion measures the document as the decoders will walk it,
// aliases expanded, without expanding anything: each anchored subtree's
// expanded cost is computed once and charged at every alias to it. It
// refuses a document whose aliases add more than maxAliasExpansion, and a
// recursive alias.
func checkAliasExpansion(root *yaml.Node) error {
	a := aliasCost{memo: map[*yaml.Node]int{}, active: map[*yaml.Node]bool{}}
	expanded, err := a.cost(root)
	if err != nil {
		return err
	}
	if extra := expanded - a.plain; extra > maxAliasExpansion {
		return fmt.Errorf("metadata uses aliases that expand to %d nodes beyond what it spells out, over the limit of %d (an alias bomb?); write the values out instead of through &anchors and *aliases", extra, maxAliasExpansion)
	}
	return nil
}

type aliasCost struct {
	memo   map[*yaml.Node]int  // expanded cost of each node seen
	active map[*yaml.Node]bool // on the current path: an alias back to one is recursive
	plain  int                 // cost of the document as written, each node once
}

// limit stops the walk early: no single subtree may cost more than the
// whole document could without aliases plus the budget.
func (a *aliasCost) limit() int { return a.plain + maxAliasExpansion }

func nodeCost(n *yaml.Node) int { return 1 + len(n.Value)/64 }

func (a *aliasCost) cost(n *yaml.Node) (int, error) {
	if c, ok := a.memo[n]; ok {
		return c, nil
	}
	if a.active[n] {
		return 0, fmt.Errorf("metadata line %d: an alias refers to a value that contains it (a recursive alias)", n.Line)
	}
	a.active[n] = true
	defer delete(a.active, n)
	c := 0
	if n.Kind == yaml.AliasNode {
		a.plain++
		if n.Alias == nil {
			return 0, fmt.Errorf("metadata line %d: alias to nothing", n.Line)
		}
		var err error
		if c, err = a.cost(n.Alias); err != nil {
			return 0, err
		}
	} else {
		c = nodeCost(n)
		a.plain += c
		for _, child := range n.Content {
			cc, err := a.cost(child)
			if err != nil {
				return 0, err
			}
			if c += cc; c > a.limit() {
				return 0, fmt.Errorf("metadata line %d: aliases expand this value past %d nodes (an alias bomb?); write the values out instead of through &anchors and *aliases", n.Line, maxAliasExpansion)
			}
		}
	}
	a.memo[n] = c
	return c, nil
}

// nodeToAny converts an unknown value for Extra. Timestamps stay text so
// that a re-rendered manifest shows what was written.
func nodeToAny(n *yaml.Node) (any, error) {
	budget := maxValueNodes
	return convertNode(n, 0, &budget)
}

func convertNode(n *yaml.Node, depth int, budget *int) (any, error) {
	n = resolveAlias(n)
	*budget--
	if depth > maxValueDepth || *budget < 0 {
		return nil, fmt.Errorf("metadata line %d: value nested deeper than %d levels or larger than %d nodes (a recursive or exploding alias?)", n.Line, maxValueDepth, maxValueNodes)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, nil
		case "!!null":
			return nil, nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("metadata line %d: %v", n.Line, err)
		}
		return v, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := convertNode(c, depth+1, budget)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := convertNode(n.Content[i+1], depth+1, budget)
			if err != nil {
				return nil, err
			}
			out[resolveAlias(n.Content[i]).Value] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("metadata line %d: unsupported YAML node", n.Line)
}

// checkSafeTags rejects tags yaml.safe_load cannot construct (e.g. !!python/object
// or a local !tag): the coordinator would fail to load such metadata.
func checkSafeTags(n *yaml.Node) error {
	if n == nil {
		return nil
	}
	switch n.Kind {
	case yaml.ScalarNode, yaml.MappingNode, yaml.SequenceNode:
		switch n.ShortTag() {
		case "!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp", "!!binary",
			"!!map", "!!seq", "!!merge", "!!set", "!!omap", "!!pairs":
		default:
			return fmt.Errorf("metadata line %d: tag %s is not one yaml.safe_load accepts", n.Line, n.Tag)
		}
	}
	for _, c := range n.Content {
		if err := checkSafeTags(c); err != nil {
			return err
		}
	}
	return nil
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return "string"
		}
		return "scalar (" + n.ShortTag() + ")"
	}
	return "node"
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+4)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func putString(m map[string]any, key, val string) {
	if val != "" {
		m[key] = val
	}
}
