package redact

import (
	"strings"
	"unicode"
)

// defaultSensitive are the name fragments whose values Airflow's secrets
// masker hides (task SDK 1.3.2, Airflow 3.3.2: DEFAULT_SENSITIVE_FIELDS):
// a variable whose key contains one, a connection extra's entry, a
// rendered field.
var defaultSensitive = []string{
	"access_key", "access_token", "api_key", "apikey", "auth_header", "authorization", "bearer",
	"connection_string", "dsn", "passphrase", "passwd", "password", "private_key", "proxy",
	"proxy_password", "proxies", "secret", "service_account", "service_key", "token",
	"keyfile_dict", "webhook_url",
}

// Names decides, as Airflow's masker does, whether a value is a secret by
// the name it goes under: the key of a variable, of a connection extra's
// entry, of a rendered field. A variable's value is masked only when its
// key is such a name (a connection's password and extra always are). The
// zero value holds Airflow's defaults.
type Names struct {
	extra []string // [core] sensitive_var_conn_names
	off   bool     // [core] hide_sensitive_var_conn_fields = False
}

// Airflow's settings Names follows, as the environment the supervisor
// passes its task processes spells them.
const (
	SensitiveNamesEnv = "AIRFLOW__CORE__SENSITIVE_VAR_CONN_NAMES"
	HideSensitiveEnv  = "AIRFLOW__CORE__HIDE_SENSITIVE_VAR_CONN_FIELDS"
)

// NamesFromEnv reads Airflow's [core] sensitive_var_conn_names (more
// fragments, comma-separated) and hide_sensitive_var_conn_fields (false
// turns name-based masking off) from the environment.
func NamesFromEnv(lookup func(string) (string, bool)) Names {
	var n Names
	if v, ok := lookup(SensitiveNamesEnv); ok {
		for _, f := range strings.Split(v, ",") {
			if f = strings.ToLower(strings.TrimSpace(f)); f != "" {
				n.extra = append(n.extra, f)
			}
		}
	}
	if v, ok := lookup(HideSensitiveEnv); ok && strings.EqualFold(strings.TrimSpace(v), "false") {
		n.off = true
	}
	return n
}

// Sensitive reports whether name's value is hidden: name, lower-cased and
// with each run of characters other than letters, digits and "_" made one
// "_", contains a sensitive fragment.
func (n Names) Sensitive(name string) bool {
	if n.off {
		return false
	}
	norm := normalizeName(name)
	for _, list := range [][]string{defaultSensitive, n.extra} {
		for _, f := range list {
			if strings.Contains(norm, f) {
				return true
			}
		}
	}
	return false
}

func normalizeName(name string) string {
	var b strings.Builder
	gap := false
	for _, r := range strings.ToLower(strings.TrimSpace(name)) {
		if r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
			gap = false
		} else if !gap {
			b.WriteByte('_')
			gap = true
		}
	}
	return b.String()
}
