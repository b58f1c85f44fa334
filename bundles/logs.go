package bundles

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/airflow-sandbox/airflow-go-worker/redact"
)

// Airflow's numeric log levels; the logs socket carries their lowercase names.
const (
	levelNotSet   = 0
	levelDebug    = 10
	levelInfo     = 20
	levelWarning  = 30
	levelError    = 40
	levelCritical = 50
)

// parseLogLevel reads an Airflow level name (NOTSET, DEBUG, INFO,
// WARN/WARNING, ERROR, CRITICAL/FATAL), case-insensitively.
func parseLogLevel(s string) (int, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "NOTSET":
		return levelNotSet, nil
	case "DEBUG", "TRACE":
		return levelDebug, nil
	case "INFO":
		return levelInfo, nil
	case "WARN", "WARNING":
		return levelWarning, nil
	case "ERROR":
		return levelError, nil
	case "CRITICAL", "FATAL":
		return levelCritical, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want NOTSET, DEBUG, INFO, WARNING, ERROR or CRITICAL)", s)
}

// logFilter decides which records reach the logs socket, as Airflow's
// runtimes must (the supervisor records every line it gets).
type logFilter struct {
	Default    int
	Namespaces map[string]int // dotted logger-name prefix -> level
}

// logFilterFromEnv reads AIRFLOW__LOGGING__LOGGING_LEVEL (default INFO) and
// AIRFLOW__LOGGING__NAMESPACE_LEVELS ("name=LEVEL" separated by commas or
// spaces). Bad entries are skipped and reported in the returned warnings,
// because a typo in logging config should not stop a task.
func logFilterFromEnv(getenv func(string) string) (logFilter, []string) {
	f := logFilter{Default: levelInfo, Namespaces: map[string]int{}}
	var warnings []string
	if s := getenv("AIRFLOW__LOGGING__LOGGING_LEVEL"); s != "" {
		if lvl, err := parseLogLevel(s); err == nil {
			f.Default = lvl
		} else {
			warnings = append(warnings, "AIRFLOW__LOGGING__LOGGING_LEVEL: "+err.Error()+"; using INFO")
		}
	}
	spec := getenv("AIRFLOW__LOGGING__NAMESPACE_LEVELS")
	for _, item := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		name, lvlName, ok := strings.Cut(item, "=")
		lvl, err := parseLogLevel(lvlName)
		if !ok || name == "" || err != nil {
			warnings = append(warnings, fmt.Sprintf("AIRFLOW__LOGGING__NAMESPACE_LEVELS: ignoring %q (want name=LEVEL)", item))
			continue
		}
		f.Namespaces[name] = lvl
	}
	return f, warnings
}

// Threshold is the level for logger name: the longest dotted prefix in
// Namespaces that matches, else Default.
func (f logFilter) Threshold(name string) int {
	best, bestLen := f.Default, -1
	for ns, lvl := range f.Namespaces {
		if (name == ns || strings.HasPrefix(name, ns+".")) && len(ns) > bestLen {
			best, bestLen = lvl, len(ns)
		}
	}
	return best
}

// airflowSink turns hclog records into Airflow's JSON log lines. Records
// made before the socket connects are buffered and flushed in order on
// Connect, so nothing logged during start-up is lost.
type airflowSink struct {
	mu      sync.Mutex
	filter  logFilter
	w       *bufio.Writer
	conn    io.Writer
	pending [][]byte
	secrets *redact.Set
	now     func() time.Time
	// fallback gets records that could not be written to the socket, so a
	// broken logs connection is visible on stderr rather than silent.
	fallback io.Writer
}

func newAirflowSink(filter logFilter) *airflowSink {
	return &airflowSink{filter: filter, secrets: redact.New(), now: time.Now, fallback: os.Stderr}
}

// Connect starts writing to w, flushing buffered records first.
func (s *airflowSink) Connect(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn = w
	s.w = bufio.NewWriter(w)
	for _, line := range s.pending {
		_, _ = s.w.Write(line) // a log that cannot be written has nowhere to say so
	}
	s.pending = nil
	return s.w.Flush()
}

// AddSecret redacts value (and each line of a multi-line value) from every
// later record.
func (s *airflowSink) AddSecret(value string) { s.secrets.Add(value) }

func hclogToAirflow(l hclog.Level) (int, string) {
	switch l {
	case hclog.Trace, hclog.Debug:
		return levelDebug, "debug"
	case hclog.Warn:
		return levelWarning, "warning"
	case hclog.Error:
		return levelError, "error"
	default:
		return levelInfo, "info"
	}
}

// Accept implements hclog.SinkAdapter.
func (s *airflowSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	lvl, lvlName := hclogToAirflow(level)
	if lvl < s.filter.Threshold(name) {
		return
	}
	s.write(name, lvlName, msg, args)
}

// write formats and emits one record; it also serves records made outside
// hclog (the runtime's own start-up messages).
func (s *airflowSink) write(name, lvlName, msg string, args []any) {
	rec := map[string]any{}
	for i := 0; i < len(args); i += 2 {
		key := fmt.Sprint(args[i])
		var v any
		if i+1 < len(args) {
			v = args[i+1]
		} else {
			key, v = "EXTRA_VALUE_AT_END", args[i]
		}
		if key == "event" || key == "level" || key == "timestamp" || key == "logger" {
			key = "field." + key // never let a field clobber the record's own keys
		}
		rec[key] = jsonSafe(v)
	}
	rec["event"] = msg
	rec["level"] = lvlName
	rec["timestamp"] = s.now().UTC().Format(time.RFC3339Nano)
	if name != "" {
		rec["logger"] = name
	}
	rec = s.secrets.Any(rec).(map[string]any)
	line, err := json.Marshal(rec)
	if err != nil {
		line, _ = json.Marshal(map[string]any{"event": s.secrets.String(msg), "level": lvlName, "timestamp": rec["timestamp"], "logger": name, "log_encoding_error": err.Error()})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	line = append(line, '\n')
	if s.w == nil {
		s.pending = append(s.pending, line)
		return
	}
	if _, err := s.w.Write(line); err == nil {
		err = s.w.Flush()
		if err == nil {
			return
		}
	}
	_, _ = s.fallback.Write(line)
}

// redact masks the registered secrets in text.
func (s *airflowSink) redact(text string) string { return s.secrets.String(text) }

// jsonSafe turns values JSON cannot encode well into strings: errors become
// their message (json would print {}), Stringers and funcs their text.
func jsonSafe(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int, int64, int32, uint, uint64, uint32, float64, float32, time.Time, time.Duration:
		if d, ok := x.(time.Duration); ok {
			return d.String()
		}
		return x
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	case hclog.Format:
		return fmt.Sprintf(x[0].(string), x[1:]...)
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return v
}

// newTaskLogger returns an hclog.Logger named name whose records go to sink.
func newTaskLogger(sink *airflowSink, name string) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:   name,
		Level:  hclog.Trace,
		Output: io.Discard,
		// The sink is the only output: without this the logger would
		// still format every line for io.Discard (a third of a log
		// call's CPU).
		Exclude: func(hclog.Level, string, ...any) bool { return true },
	})
	l.RegisterSink(sink)
	return l
}
