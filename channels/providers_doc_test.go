package channels

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docRow is one row of a "How Sluice answers each code" table in
// docs/providers.md.
type docRow struct {
	line                       int
	code                       int
	class, scope, wait, repeat string
}

// providerTables reads the WhatsApp and Twilio tables of docs/providers.md's
// last section, by provider.
func providerTables(t *testing.T) map[string][]docRow {
	t.Helper()
	f, err := os.Open("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]docRow{}
	section, provider := false, ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case l == "## How Sluice answers each code":
			section = true
		case !section:
		case strings.HasPrefix(l, "### WhatsApp"):
			provider = ProviderWhatsApp
		case strings.HasPrefix(l, "### Twilio"):
			provider = ProviderTwilio
		case strings.HasPrefix(l, "### "):
			provider = ""
		case provider != "" && strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| code"):
			cells := strings.Split(strings.Trim(l, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			if len(cells) != 6 {
				t.Fatalf("docs/providers.md:%d: %d cells, want 6", n, len(cells))
			}
			code, err := strconv.Atoi(cells[0])
			if err != nil {
				t.Fatalf("docs/providers.md:%d: code %q: %v", n, cells[0], err)
			}
			out[provider] = append(out[provider], docRow{n, code, cells[1], cells[2], cells[3], cells[4]})
		}
	}
	if len(out[ProviderWhatsApp]) == 0 || len(out[ProviderTwilio]) == 0 {
		t.Fatalf("docs/providers.md: tables not found: %d WhatsApp, %d Twilio rows", len(out[ProviderWhatsApp]), len(out[ProviderTwilio]))
	}
	return out
}

// TestProvidersDocMatchesClassification: every code in docs/providers.md's
// tables is classified as the table says (class, scope, wait when the
// provider names none, growth of repeated pauses), and every code the
// channels know is in the tables.
func TestProvidersDocMatchesClassification(t *testing.T) {
	tables := providerTables(t)
	known := map[string]map[int]codeRule{ProviderWhatsApp: whatsappCodes, ProviderTwilio: twilioCodes}
	for provider, rows := range tables {
		seen := map[int]bool{}
		for _, r := range rows {
			seen[r.code] = true
			t.Run(fmt.Sprintf("%s/%d", provider, r.code), func(t *testing.T) {
				where := fmt.Sprintf("docs/providers.md:%d", r.line)
				status := 400
				switch r.code {
				case 4, 20429:
					status = 429
				case 190, 20003:
					status = 400 // Meta often sends 190 with 400: the code decides, not a 401
				}
				var err error
				switch provider {
				case ProviderWhatsApp:
					_, err = whatsappResult(&reply{status: status, header: http.Header{}, body: []byte(waErrBody(r.code, false))}, testNow)
				case ProviderTwilio:
					body := fmt.Sprintf(`{"code":%d,"message":"m","status":%d}`, r.code, status)
					_, err = twilioResult(&reply{status: status, header: http.Header{}, body: []byte(body)}, testNow)
				}
				e, ok := err.(*Error)
				if !ok {
					t.Fatalf("%s: %d gave %v, want an *Error", where, r.code, err)
				}
				if e.Class.String() != r.class || e.Scope != r.scope {
					t.Errorf("%s: %d classified %s scope %q, the table says %s scope %q", where, r.code, e.Class, e.Scope, r.class, r.scope)
				}
				var wait time.Duration
				switch r.wait {
				case "", "backoff":
				case "until midnight America/Los_Angeles":
					wait = untilPacificMidnight(testNow)
				default:
					if wait, err = time.ParseDuration(r.wait); err != nil {
						t.Fatalf("%s: wait %q: %v", where, r.wait, err)
					}
				}
				if e.RetryAfter != wait {
					t.Errorf("%s: %d waits %v, the table says %q (%v)", where, r.code, e.RetryAfter, r.wait, wait)
				}
				growth, most := parseRepeats(t, where, r.repeat)
				if max(e.Growth, 1) != max(growth, 1) {
					t.Errorf("%s: %d grows ×%v on repeats, the table says ×%v", where, r.code, e.Growth, growth)
				}
				if e.MaxWait != most {
					t.Errorf("%s: %d grows to at most %v, the table says %v", where, r.code, e.MaxWait, most)
				}
			})
		}
		for code := range known[provider] {
			if !seen[code] {
				t.Errorf("docs/providers.md: %s code %d is classified by the channel but missing from its table", provider, code)
			}
		}
	}
}

// parseRepeats reads a "repeats" cell: "" (fixed), "2", or "2, at most
// 30s" (the growth and its bound, Error.MaxWait).
func parseRepeats(t *testing.T, where, cell string) (growth float64, most time.Duration) {
	t.Helper()
	if cell == "" {
		return 0, 0
	}
	g, bound, capped := strings.Cut(cell, ", at most ")
	growth, err := strconv.ParseFloat(g, 64)
	if err != nil {
		t.Fatalf("%s: repeats %q: %v", where, cell, err)
	}
	if capped {
		if most, err = time.ParseDuration(bound); err != nil {
			t.Fatalf("%s: repeats %q: %v", where, cell, err)
		}
	}
	return growth, most
}
