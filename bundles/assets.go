package bundles

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/airflow-sandbox/airflow-go-worker/bundles/protocol"
)

// The data model a task reads and reports: assets and their events (the
// ones that triggered the run, the outlets it reports), and the name of a
// mapped instance. Plain types and functions: the binder (bind.go) and the
// runtime call them; they call neither.

// Asset is an asset a task writes (an outlet) or reads (an inlet), as the
// stub Dag declares it: Asset("s3://bucket/converted/") or Asset(name=...,
// uri=...). Either field may be empty, and then takes the other's value, as
// Airflow's Asset does.
type Asset = protocol.AssetKey

// assetMatches reports whether ref (an asset URI or name) names a.
func assetMatches(a Asset, ref string) bool {
	k := a.Unique()
	return ref == k.URI || ref == k.Name
}

// Outlets are the asset events a task emits when it succeeds: one for each
// asset the task declares (WithOutlets, the bundle config's outlets:), with
// the extra the task sets here, plus events through its asset aliases. A
// task function receives it by declaring a *Outlets parameter. Safe for
// concurrent use.
type Outlets struct {
	mu      sync.Mutex
	assets  []Asset
	aliases []string
	events  []*OutletEvent
	alias   []protocol.OutletEvent
}

// OutletEvent is the event one declared asset gets.
type OutletEvent struct {
	asset      Asset
	mu         *sync.Mutex
	extra      map[string]any
	partitions []string
}

// NewOutlets is the Outlets of a task declaring assets and aliases, for
// code that runs task functions outside the runtime (tests, adapters);
// the runtime makes each task's own.
func NewOutlets(assets []Asset, aliases []string) *Outlets { return newOutlets(assets, aliases) }

// Extra is a copy of the event's extra so far.
func (e *OutletEvent) Extra() map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]any, len(e.extra))
	for k, v := range e.extra {
		out[k] = v
	}
	return out
}

func newOutlets(assets []Asset, aliases []string) *Outlets {
	o := &Outlets{assets: assets, aliases: aliases}
	for _, a := range assets {
		o.events = append(o.events, &OutletEvent{asset: a, mu: &o.mu, extra: map[string]any{}})
	}
	return o
}

// Assets lists the declared outlets (none for a nil Outlets).
func (o *Outlets) Assets() []Asset {
	if o == nil {
		return nil
	}
	return append([]Asset(nil), o.assets...)
}

// SetExtra sets key in the extra of every declared asset's event (the
// usual case: one outlet). value must encode as JSON.
func (o *Outlets) SetExtra(key string, value any) error {
	if len(o.events) == 0 {
		return fmt.Errorf("outlet extra %q: the task declares no asset outlets; declare them (bundle config outlets: [{uri: ...}], or bundles.WithOutlets) as the stub's outlets=[...] does", key)
	}
	for _, e := range o.events {
		if err := e.SetExtra(key, value); err != nil {
			return err
		}
	}
	return nil
}

// Event is the event of the declared asset whose URI or name is asset.
func (o *Outlets) Event(asset string) (*OutletEvent, error) {
	for _, e := range o.events {
		if assetMatches(e.asset, asset) {
			return e, nil
		}
	}
	return nil, fmt.Errorf("asset %q is not an outlet of this task (declared: %s); add it to the task's outlets in the bundle config and the stub Dag", asset, describeAssets(o.assets))
}

// AliasEvent emits an event for asset through the declared alias, with
// extra: Airflow creates the asset if no Dag declares it, and Dags
// scheduled on the alias run.
func (o *Outlets) AliasEvent(alias string, asset Asset, extra map[string]any) error {
	found := false
	for _, a := range o.aliases {
		found = found || a == alias
	}
	if !found {
		return fmt.Errorf("asset alias %q is not an outlet of this task (declared aliases: %s); add {alias: %s} to its outlets", alias, strings.Join(o.aliases, ", "), alias)
	}
	ex, err := jsonObject(extra)
	if err != nil {
		return fmt.Errorf("asset alias %q event extra: %w", alias, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.alias = append(o.alias, protocol.OutletEvent{DestAssetKey: asset.Unique(), Extra: ex, SourceAliasName: alias, DestAssetExtra: map[string]any{}})
	return nil
}

// SetExtra sets key in the event's extra; value must encode as JSON.
func (e *OutletEvent) SetExtra(key string, value any) error {
	v, err := toJSONValue(value)
	if err != nil {
		return fmt.Errorf("outlet %s extra %q is not JSON-encodable: %w", e.asset, key, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.extra[key] = v
	return nil
}

// AddPartitionKeys emits one event per key, for those partitions of the
// asset (Airflow 3.3's partitioned assets), instead of one for the run's.
func (e *OutletEvent) AddPartitionKeys(keys ...string) error {
	for _, k := range keys {
		if strings.TrimSpace(k) == "" {
			return fmt.Errorf("outlet %s: a partition key must not be empty", e.asset)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.partitions = append(e.partitions, keys...)
	return nil
}

// terminal is the SucceedTask's task_outlets and outlet_events: a profile
// per declared asset and alias, and an event for each asset whose extra or
// partitions were set (Airflow registers one with an empty extra for the
// others) and each alias event.
func (o *Outlets) terminal() ([]protocol.AssetProfile, []protocol.OutletEvent) {
	profiles := []protocol.AssetProfile{}
	events := []protocol.OutletEvent{}
	if o == nil {
		return profiles, events
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.events {
		k := e.asset.Unique()
		name, uri := k.Name, k.URI
		profiles = append(profiles, protocol.AssetProfile{Name: &name, URI: &uri, Type: protocol.AssetTypeAsset})
		switch {
		case len(e.partitions) > 0:
			for _, p := range e.partitions {
				events = append(events, protocol.OutletEvent{DestAssetKey: k, Extra: e.extra, PartitionKey: p})
			}
		case len(e.extra) > 0:
			events = append(events, protocol.OutletEvent{DestAssetKey: k, Extra: e.extra})
		}
	}
	for _, a := range o.aliases {
		name := a
		profiles = append(profiles, protocol.AssetProfile{Name: &name, Type: protocol.AssetTypeAlias})
	}
	return profiles, append(events, o.alias...)
}

func describeAssets(assets []Asset) string {
	if len(assets) == 0 {
		return "none"
	}
	s := make([]string, len(assets))
	for i, a := range assets {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// jsonObject is m as plain JSON values; nil is an empty object.
func jsonObject(m map[string]any) (map[string]any, error) {
	if m == nil {
		return map[string]any{}, nil
	}
	v, err := toJSONValue(m)
	if err != nil {
		return nil, err
	}
	out, _ := v.(map[string]any)
	return out, nil
}

// AssetEvent is an asset event that triggered the Dag run
// (DagRun.TriggeringAssetEvents).
type AssetEvent = protocol.AssetEvent

// jsonEvents gives the events' extras the values a JSON decode would
// (int64, float64, []any, map[string]any), as every other input has.
func jsonEvents(events []AssetEvent) {
	for i := range events {
		events[i].AssetExtra = jsonMap(events[i].AssetExtra)
		events[i].Extra = jsonMap(events[i].Extra)
	}
}

func jsonMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	out, _ := jsonValue(m).(map[string]any)
	return out
}

// eventFields is the event as the paths of an {asset_event: ..., field: ...}
// binding see it.
func eventFields(e AssetEvent) map[string]any {
	k := e.Asset.Unique()
	ts := ""
	if !e.Timestamp.IsZero() {
		ts = e.Timestamp.UTC().Format("2006-01-02T15:04:05.999999Z07:00")
	}
	aliases := make([]any, len(e.SourceAliases))
	for i, a := range e.SourceAliases {
		aliases[i] = a
	}
	return map[string]any{
		"asset":            map[string]any{"name": k.Name, "uri": k.URI, "extra": e.AssetExtra},
		"extra":            e.Extra,
		"source_dag_id":    e.SourceDagID,
		"source_run_id":    e.SourceRunID,
		"source_task_id":   e.SourceTaskID,
		"source_map_index": int64(e.SourceMapIndex),
		"source_aliases":   aliases,
		"timestamp":        ts,
		"partition_key":    e.PartitionKey,
	}
}

// lookupPath walks a dotted path (extra.url, asset.uri) through maps, and
// through lists by index (extra.urls.0: an export's first file).
func lookupPath(v any, path string) (any, bool) {
	if path == "" {
		return v, true
	}
	for _, seg := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[seg]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		case protocol.TooDeep:
			return c, true // the value is cut here: the caller says so
		default:
			return nil, false
		}
	}
	return v, true
}

// tooDeepEvent is the error for a binding into the part of an asset
// event's extra that was cut for nesting deeper than protocol.MaxNesting,
// or nil when value (what field picked) holds none of it.
func tooDeepEvent(e AssetEvent, field string, value any) error {
	path, deep := protocol.FindTooDeep(value)
	if !deep {
		return nil
	}
	below := strings.Count(path, ".") + strings.Count(path, "[")
	return fmt.Errorf("the triggering event of %s (from %s/%s) cannot give %s: its extra nests deeper than a frame may (%d levels), %d levels below %s, so the runtime did not read that part (%w); have the producer keep the event's extra flatter, or bind a shallower field",
		e.Asset, e.SourceDagID, e.SourceRunID, field, protocol.MaxNesting, below, field, protocol.ErrTooDeep)
}

// renderMapIndex fills template's {input} placeholders from the bound
// input values (nil checks the names only).
func (t *task) renderMapIndex(template string, values map[string]any) (string, error) {
	var out strings.Builder
	rest := template
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			out.WriteString(rest)
			return out.String(), nil
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return "", fmt.Errorf("map index template %q: an unclosed {", template)
		}
		name := rest[open+1 : open+end]
		// {field[entry]}: one entry of a mapping input.
		field, entry, err := splitEntry(name)
		if err != nil {
			return "", fmt.Errorf("map index template %q: %w", template, err)
		}
		i, ok := t.byFold[foldName(field)]
		if !ok {
			return "", fmt.Errorf("map index template %q: {%s} names no input field (fields: %s)", template, name, t.fieldList())
		}
		out.WriteString(rest[:open])
		v := values[t.fields[i].name]
		if m, isMap := v.(map[string]any); isMap && entry != "" {
			v = m[entry]
		}
		switch v := v.(type) {
		case nil:
		case string:
			out.WriteString(v)
		default:
			data, _ := json.Marshal(v)
			out.Write(data)
		}
		rest = rest[open+end+1:]
	}
}
