package redact

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

const pem = `-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj
MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu
NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ
-----END PRIVATE KEY-----
`

func TestStringMasksWholeSecretsLongestFirst(t *testing.T) {
	s := New("hunter2-long", "hunter2", "no")
	got := s.String("a hunter2-long b hunter2 c no")
	if got != "a *** b *** c no" {
		t.Fatalf("got %q", got)
	}
	if (*Set)(nil).String("x") != "x" || New().String("abc") != "abc" {
		t.Fatal("an empty set must leave text alone")
	}
}

// The attack of issue 10, hole 3: a PEM key printed line by line, as every
// line-oriented log path does, showed its inner lines. Each line of a
// multi-line secret is now a pattern of its own.
func TestMultiLineSecretMaskedLineByLine(t *testing.T) {
	s := New(pem)
	for _, line := range strings.Split(strings.TrimSpace(pem), "\n") {
		if got := s.String("out: " + line); got != "out: ***" {
			t.Errorf("line %q shows as %q", line, got)
		}
	}
	if got := s.String("key=" + pem); strings.Contains(got, "MIIE") || strings.Count(got, Mask) != 1 {
		t.Errorf("the whole key in one text should be one ***, got %q", got)
	}
	// CRLF output (a Windows-made key, a terminal) masks the same lines.
	crlf := strings.ReplaceAll(pem, "\n", "\r\n")
	if got := New(crlf).String("MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu"); got != Mask {
		t.Errorf("a CRLF key's line shows as %q", got)
	}
}

func TestShortLinesOfASecretAreNotPatterns(t *testing.T) {
	s := New("{\n  \"a\": \"b\"\n}\n")
	if got := s.String("{ x }"); got != "{ x }" {
		t.Fatalf("a lone brace of a secret must not be masked everywhere: %q", got)
	}
}

// A service-account blob: printed as is, each line is masked; printed
// through jq -r .private_key, the key's own lines (real newlines once the
// JSON string is decoded) are masked too.
func TestJSONSecretMasksItsStringsAndTheirLines(t *testing.T) {
	blob, _ := json.MarshalIndent(map[string]any{
		"type": "service_account", "private_key": pem, "client_email": "bot@proj.iam.example.com",
	}, "", "  ")
	s := New(string(blob))
	for _, line := range strings.Split(string(blob), "\n") {
		if got := s.String(line); len(strings.TrimSpace(line)) >= MinPartLength && got != Mask && !strings.HasPrefix(strings.TrimSpace(got), Mask) {
			t.Errorf("blob line %q shows as %q", line, got)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(pem), "\n") {
		if got := s.String(line); got != Mask {
			t.Errorf("decoded key line %q shows as %q", line, got)
		}
	}
	if got := s.String("sent by bot@proj.iam.example.com"); got != "sent by ***" {
		t.Errorf("a string value of the blob shows as %q", got)
	}
}

func TestAnyWalksValuesAndRendersScalars(t *testing.T) {
	s := New("12345678", "s3cr3t")
	in := map[string]any{"a": "x s3cr3t", "n": 12345678, "l": []any{"s3cr3t", true, nil}, "ok": 7}
	out := s.Any(in).(map[string]any)
	if out["a"] != "x ***" || out["n"] != Mask || out["ok"] != 7 {
		t.Fatalf("got %v", out)
	}
	if l := out["l"].([]any); l[0] != Mask || l[1] != true || l[2] != nil {
		t.Fatalf("list: %v", l)
	}
	if in["a"] != "x s3cr3t" {
		t.Fatal("Any must not change its input")
	}
}

// collect runs text through a Lines writer in the given chunk sizes.
func collect(set *Set, maxLine int, text string, chunks func() int) (pieces []string, newlines []bool) {
	l := NewLines(set, maxLine, func(s string, nl bool) {
		pieces = append(pieces, s)
		newlines = append(newlines, nl)
	})
	for len(text) > 0 {
		n := min(len(text), max(1, chunks()))
		l.Write([]byte(text[:n]))
		text = text[n:]
	}
	l.Flush()
	return pieces, newlines
}

// However a pipe chunks the output and wherever a long line is cut, the
// pieces of a line, joined, are exactly that line masked whole.
func TestLinesMaskAcrossChunksAndCuts(t *testing.T) {
	secrets := []string{"sk-live-0123456789abcdef", "sk-live-0123", "tok_ABCDEFGH"}
	set := New(secrets...)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 300; round++ {
		var b strings.Builder
		for b.Len() < 200+rng.IntN(400) {
			if rng.IntN(4) == 0 {
				b.WriteString(secrets[rng.IntN(len(secrets))])
			} else {
				b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789-_"[rng.IntN(38)])
			}
		}
		line := b.String()
		maxLine := 1 + rng.IntN(80)
		pieces, nls := collect(set, maxLine, line+"\n", func() int { return 1 + rng.IntN(50) })
		if got, want := strings.Join(pieces, ""), set.String(line); got != want {
			t.Fatalf("round %d (maxLine %d):\n got %q\nwant %q", round, maxLine, got, want)
		}
		if !nls[len(nls)-1] {
			t.Fatalf("round %d: the last piece should end the line", round)
		}
		for _, p := range pieces {
			if len(p) > 2*max(maxLine, 2*set.MaxLen()) {
				t.Fatalf("round %d: a %d-byte piece exceeds the bound", round, len(p))
			}
		}
	}
}

func TestLinesSplitsAndTrimsCR(t *testing.T) {
	pieces, nls := collect(New("s3cr3t"), 1<<10, "a s3cr3t\r\nb\nrest", func() int { return 3 })
	if fmt.Sprint(pieces, nls) != "[a *** b rest] [true true false]" {
		t.Fatalf("got %q %v", pieces, nls)
	}
}

// A secret registered while its line is still buffered is masked too.
func TestLinesMaskWhatIsAddedMidLine(t *testing.T) {
	set := New()
	var got []string
	l := NewLines(set, 1<<10, func(s string, _ bool) { got = append(got, s) })
	l.Write([]byte("token=abcdef"))
	set.Add("abcdef")
	l.Write([]byte(" end\n"))
	if len(got) != 1 || got[0] != "token=*** end" {
		t.Fatalf("got %q", got)
	}
}

func FuzzLines(f *testing.F) {
	f.Add("sk-0123456789", "xx sk-0123456789 yy\nzz", uint8(5), uint8(3))
	f.Add("line one\nline two", "a line one\nline two b", uint8(4), uint8(1))
	f.Add("0", "\r", uint8(1), uint8(0)) // renders as nothing: no line
	f.Add("s3cr3t", "a s3\u00a0\u00a0cr\ufe0f3t\t\x1b]0;x\nb\x07 c\nd", uint8(3), uint8(2))
	f.Fuzz(func(t *testing.T, secret, text string, maxLine, chunk uint8) {
		set := New(secret)
		pieces, nls := collect(set, int(maxLine), text, func() int { return int(chunk) })
		// Rebuild the lines from the pieces and compare with masking each
		// input line whole.
		var lines []string
		var cur strings.Builder
		for i, p := range pieces {
			cur.WriteString(p)
			if nls[i] {
				lines = append(lines, cur.String())
				cur.Reset()
			}
		}
		if cur.Len() > 0 || (len(pieces) > 0 && !nls[len(nls)-1]) {
			lines = append(lines, cur.String())
		}
		// Lines emits the text as rendered (invisible units dropped, gap
		// runs cut), whatever the chunking: each line is that line of the
		// whole rendered text, masked whole.
		shown := renderAsLines(text)
		want := strings.Split(shown, "\n")
		if strings.HasSuffix(shown, "\n") || want[len(want)-1] == "" {
			want = want[:len(want)-1] // an empty last line is not emitted
		}
		if len(lines) != len(want) {
			t.Fatalf("%d lines out, %d in %q", len(lines), len(want), shown)
		}
		for i, w := range want {
			if got := set.String(w); lines[i] != got {
				t.Fatalf("line %d: got %q, want %q", i, lines[i], got)
			}
		}
	})
}

// renderAsLines is text as Lines renders it, written at once.
func renderAsLines(text string) string {
	var b strings.Builder
	gaps := 0
	for i := 0; i < len(text); {
		n, complete := invisibleAt(text, i)
		switch {
		case !complete:
			return b.String() // cut by the end of the stream
		case n > 0 && gapUnit(text[i:i+n]):
			if gaps < maxGapRun {
				b.WriteString(text[i : i+n])
			}
			gaps++
			i += n
		case n > 0:
			i += n
		default:
			_, size := utf8.DecodeRuneInString(text[i:])
			b.WriteString(text[i : i+size])
			gaps = 0
			i += size
		}
	}
	return b.String()
}

func BenchmarkLines(b *testing.B) {
	set := New(pem, "s3cr3t-password", "AKIAEXAMPLEKEY0001")
	line := []byte(strings.Repeat("some ordinary output without secrets, ", 3) + "\n")
	l := NewLines(set, 16<<10, func(string, bool) {})
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		l.Write(line)
	}
}

// Masking while secrets are added (the supervisor adds MaskSecret values
// while output streams) is safe: run with -race.
func TestConcurrentAddAndMask(t *testing.T) {
	s := New("first-secret")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			s.Add(fmt.Sprintf("secret-number-%03d", i))
		}
	}()
	for range 200 {
		if got := s.String("x first-secret y"); got != "x *** y" {
			t.Fatalf("got %q", got)
		}
	}
	<-done
}

// render is what a terminal or a log viewer shows of text.
func render(text string) string { return visibleForm(text) }

// Issue 19, hole 4: one invisible byte inside a printed secret (a CR, an
// ANSI reset, a NUL, a TAB, a zero-width space) kept it from matching,
// while a terminal or the Airflow UI showed it whole. Every masking path
// matches as rendered: String (log records, replies), Any (XCom, fields)
// and Lines (command output, however chunked).
func TestSecretsAreMaskedAsRendered(t *testing.T) {
	const secret = "s3cr3t-value-42"
	set := New(secret)
	cut := len(secret) / 2
	for name, inside := range map[string]string{
		"CR": "\r", "ANSI reset": "\x1b[0m", "NUL": "\x00", "TAB": "\t", "zero-width space": "\u200b",
		"OSC title": "\x1b]0;x\x07", "colour and bold": "\x1b[1;31m\x1b[22m", "BOM": "\ufeff", "soft hyphen": "\u00ad",
	} {
		printed := "before " + secret[:cut] + inside + secret[cut:] + " after"
		if !strings.Contains(render(printed), secret) {
			t.Fatalf("%s: the test's rendering does not show the secret, so it proves nothing", name)
		}
		if got := set.String(printed); strings.Contains(render(got), secret) || !strings.HasPrefix(got, "before ***") {
			t.Errorf("%s: String gave %q", name, got)
		}
		if got := set.Any(map[string]any{"v": []any{printed}}); strings.Contains(render(fmt.Sprint(got)), secret) {
			t.Errorf("%s: Any gave %q", name, got)
		}
		for _, chunk := range []int{1, 3, 7, 1 << 10} {
			pieces, _ := collect(set, 4, printed+"\n", func() int { return chunk })
			if got := strings.Join(pieces, ""); strings.Contains(render(got), secret) || !strings.Contains(got, "***") {
				t.Errorf("%s, chunks of %d: Lines gave %q", name, chunk, got)
			}
		}
	}
	// A secret that itself holds a TAB is masked however it is printed.
	tabbed := New("col1\tcol2-secret")
	if got := tabbed.String("x col1\tcol2-secret y"); got != "x *** y" {
		t.Errorf("a secret with a TAB: %q", got)
	}
	// Padding cannot outgrow what Lines keeps, nor split the secret.
	padded := ""
	for _, c := range secret {
		padded += string(c) + strings.Repeat("\t", 20) + strings.Repeat("\x1b[0m", 50)
	}
	pieces, _ := collect(set, 16, padded+"\n", func() int { return 5 })
	if got := strings.Join(pieces, ""); strings.Contains(render(got), secret) {
		t.Errorf("a padded secret leaked through Lines: %q", got)
	}
}

// However invisible bytes are sprinkled through secrets (escape sequences,
// controls, any Default_Ignorable_Code_Point, any gap) and however the
// stream is chunked, no secret shows once Lines' output is rendered.
func TestLinesMaskSprinkledSecretsAsRendered(t *testing.T) {
	secrets := []string{"sk-live-0123456789abcdef", "tok_ABCDEFGH"}
	set := New(secrets...)
	invisible := []string{"\r", "\x00", "\t", "\x1b[0m", "\x1b[38;5;196m", "\x1b]8;;http://x\x07", "\u200b", "\ufeff", "\x7f"}
	ranges := invisibleRanges() // and any ignorable character or gap (issue 29)
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 300; round++ {
		var b strings.Builder
		placed := 0
		for b.Len() < 100+rng.IntN(300) {
			if rng.IntN(5) > 0 {
				b.WriteByte("abcdefghij -_"[rng.IntN(13)])
				continue
			}
			for _, c := range secrets[rng.IntN(len(secrets))] {
				b.WriteRune(c)
				switch rng.IntN(6) {
				case 0:
					b.WriteString(invisible[rng.IntN(len(invisible))])
				case 1:
					b.WriteString(randomInvisible(rng, ranges))
				}
			}
			placed++
		}
		pieces, _ := collect(set, 1+rng.IntN(60), b.String()+"\n", func() int { return 1 + rng.IntN(20) })
		got := render(strings.Join(pieces, ""))
		for _, s := range secrets {
			if strings.Contains(got, s) {
				t.Fatalf("round %d: %q shows in %q (from %q)", round, s, got, b.String())
			}
		}
		if strings.Count(got, Mask) < placed {
			t.Fatalf("round %d: %d secrets placed, %d masked: %q", round, placed, strings.Count(got, Mask), got)
		}
	}
}
