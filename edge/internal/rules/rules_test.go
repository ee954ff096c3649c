package rules

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tailor-project/tailor/edge/internal/knobs"
)

const vectors = "../../../spec/vectors/decision-table/"

// decideVectors is spec/vectors/decision-table/decide.json.
type decideVectors struct {
	SipHash []struct{ Key, Msg, Out string } `json:"siphash"`
	Cohorts []struct {
		Salt, Addr, Unit, Draw string
		Version                int64
	} `json:"cohorts"`
	Tables []struct {
		Name  string          `json:"name"`
		Table json.RawMessage `json:"table"`
		Cases []decideCase    `json:"cases"`
	} `json:"tables"`
}

type decideCase struct {
	Addr       string   `json:"addr"`
	SNI        string   `json:"sni"`
	Device     string   `json:"device"`
	Draw       string   `json:"draw"`
	CohortDraw string   `json:"cohort_draw"`
	Group      *string  `json:"group"`
	Config     string   `json:"config"`
	P          float64  `json:"p"`
	Holdback   bool     `json:"holdback"`
	Layers     []string `json:"layers"`
	Why        string   `json:"why"`
}

func hex64(t *testing.T, s string) uint64 {
	t.Helper()
	if s == "" {
		return 0
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatalf("bad hex uint64 %q: %v", s, err)
	}
	return v
}

// vectorTable is the named table of decide.json, parsed.
func vectorTable(t *testing.T, name string) (*Table, json.RawMessage) {
	t.Helper()
	var v decideVectors
	readVectors(t, "decide.json", &v)
	for _, tb := range v.Tables {
		if tb.Name == name {
			table, err := Parse(tb.Table, registry(t))
			if err != nil {
				t.Fatalf("vector table %s rejected: %v", name, err)
			}
			return table, tb.Table
		}
	}
	t.Fatalf("decide.json has no table %q", name)
	return nil, nil
}

func readVectors(t *testing.T, name string, into any) {
	t.Helper()
	b, err := os.ReadFile(vectors + name)
	if err != nil {
		t.Skipf("shared vectors not reachable: %v", err)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatal(err)
	}
}

func registry(t *testing.T) *knobs.Registry {
	t.Helper()
	reg, err := knobs.Default()
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestSipHashVectors(t *testing.T) {
	var v decideVectors
	readVectors(t, "decide.json", &v)
	if len(v.SipHash) == 0 {
		t.Fatal("decide.json has no siphash vectors")
	}
	for _, c := range v.SipHash {
		key, err1 := hex.DecodeString(c.Key)
		msg, err2 := hex.DecodeString(c.Msg)
		if err1 != nil || err2 != nil || len(key) != 16 {
			t.Fatalf("bad vector %+v", c)
		}
		k0, k1, ok := SaltKey(c.Key)
		if !ok {
			t.Fatalf("SaltKey(%s) refused", c.Key)
		}
		if got := SipHash24(k0, k1, msg); got != hex64(t, c.Out) {
			t.Errorf("SipHash24(key %s, msg %q) = %016x, want %s", c.Key, c.Msg, got, c.Out)
		}
	}
}

func TestCohortVectors(t *testing.T) {
	var v decideVectors
	readVectors(t, "decide.json", &v)
	if len(v.Cohorts) == 0 {
		t.Fatal("decide.json has no cohort vectors")
	}
	versions := map[int64]bool{}
	for _, c := range v.Cohorts {
		if c.Version < 1 {
			t.Fatalf("cohort vector %+v has no version", c)
		}
		versions[c.Version] = true
		a := netip.MustParseAddr(c.Addr)
		u := CohortUnit(a)
		if got := hex.EncodeToString(u[:]); got != c.Unit {
			t.Errorf("CohortUnit(%s) = %s, want %s", c.Addr, got, c.Unit)
		}
		k0, k1, _ := SaltKey(c.Salt)
		if got := CohortDraw(k0, k1, a, c.Version); got != hex64(t, c.Draw) {
			t.Errorf("CohortDraw(%s, %s, version %d) = %016x, want %s", c.Salt, c.Addr, c.Version, got, c.Draw)
		}
	}
	if len(versions) < 2 {
		t.Errorf("cohort vectors cover versions %v, want at least two", versions)
	}
}

// TestCohortNewVersion: over many clients, a new table version (same
// salt) keeps every client's holdback half and re-draws the configuration
// half independently: the high halves are equal, the low halves differ,
// and a 50/50 pick changes for about half the clients and a 75/25 pick for
// 2 x 0.75 x 0.25 of them. A version above 2^32 is hashed whole (not its
// low 32 bits), as the sock_ops program does with meta.version.
func TestCohortNewVersion(t *testing.T) {
	k0, k1, _ := SaltKey("000102030405060708090a0b0c0d0e0f")
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 50000
	half, quarter := Thresholds([]float64{0.5, 0.5}), Thresholds([]float64{0.75, 0.25})
	changedHalf, changedQuarter, sameLo := 0, 0, 0
	for i := range n {
		var a netip.Addr
		if i%2 == 0 {
			a = netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
		} else {
			var b [16]byte
			binary.LittleEndian.PutUint64(b[:8], rng.Uint64())
			binary.LittleEndian.PutUint64(b[8:], rng.Uint64())
			a = netip.AddrFrom16(b)
		}
		d7, d8 := CohortDraw(k0, k1, a, 7), CohortDraw(k0, k1, a, 8)
		if d7>>32 != d8>>32 {
			t.Fatalf("%s: holdback half %08x in version 7, %08x in version 8", a, d7>>32, d8>>32)
		}
		u := CohortUnit(a)
		if h := SipHash24(k0, k1, u[:]); d7>>32 != h>>32 {
			t.Fatalf("%s: holdback half %08x, SipHash(unit) %016x", a, d7>>32, h)
		}
		if uint32(d7) == uint32(d8) {
			sameLo++
		}
		if Pick(half, d7) != Pick(half, d8) {
			changedHalf++
		}
		if Pick(quarter, d7) != Pick(quarter, d8) {
			changedQuarter++
		}
		if hi := int64(1)<<32 + 7; i < 1000 && uint32(CohortDraw(k0, k1, a, hi)) == uint32(d7) {
			t.Errorf("%s: version 2^32+7 draws the arm half of version 7", a)
		}
	}
	if sameLo > 2 {
		t.Errorf("%d of %d clients keep their arm half in the next version", sameLo, n)
	}
	for _, c := range []struct {
		name    string
		changed int
		p       float64
	}{{"50/50", changedHalf, 0.5}, {"75/25", changedQuarter, 2 * 0.75 * 0.25}} {
		share := float64(c.changed) / n
		if sd := math.Sqrt(c.p * (1 - c.p) / n); math.Abs(share-c.p) > 5*sd {
			t.Errorf("%s pick changed for %.4f of clients, want %.4f (independent re-draw)", c.name, share, c.p)
		}
	}
}

// TestDecideNewVersion: the cohorts table republished as version 8 keeps
// every client's holdback flag (and a held-back client's decision) and
// re-draws the treated clients' configurations.
func TestDecideNewVersion(t *testing.T) {
	t7, _ := vectorTable(t, "cohorts")
	t8 := *t7
	t8.Version = t7.Version + 1
	r7, r8 := NewResolver(t7), NewResolver(&t8)
	held, treated, changed := 0, 0, 0
	for i := range 1 << 16 {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) // 10.1.0.0/16: group fast (0.75 / 0.25)
		d7, d8 := r7.Decide(Conn{Addr: a}, 0), r8.Decide(Conn{Addr: a}, 0)
		switch {
		case d7.Holdback != d8.Holdback:
			t.Fatalf("%s: holdback %v in version 7, %v in version 8", a, d7.Holdback, d8.Holdback)
		case d7.Holdback:
			held++
			if d7 != d8 {
				t.Fatalf("held-back %s: %+v in version 7, %+v in version 8", a, d7, d8)
			}
		default:
			treated++
			if d7.Config != d8.Config {
				changed++
			}
		}
	}
	n := float64(1 << 16)
	if share, h := float64(held)/n, t7.Holdback; math.Abs(share-h) > 5*math.Sqrt(h*(1-h)/n) {
		t.Errorf("%.4f of clients held back, table holdback %.2f", share, h)
	}
	p := 2 * 0.75 * 0.25
	if share := float64(changed) / float64(treated); math.Abs(share-p) > 5*math.Sqrt(p*(1-p)/float64(treated)) {
		t.Errorf("%.4f of treated clients changed configuration in version 8, want about %.4f", share, p)
	}
	t.Logf("65536 clients: %d held back in both versions, %d of %d treated re-drawn to another configuration", held, changed, treated)
}

// TestDecideVectors: every decision of decide.json (both tables, every
// layer) is what rules.Decide gives.
func TestDecideVectors(t *testing.T) {
	var v decideVectors
	readVectors(t, "decide.json", &v)
	if len(v.Tables) != 2 {
		t.Fatalf("decide.json has %d tables, want 2 (per-connection, cohorts)", len(v.Tables))
	}
	passed, total := 0, 0
	for _, tb := range v.Tables {
		table, err := Parse(tb.Table, registry(t))
		if err != nil {
			t.Fatalf("vector table %s rejected: %v", tb.Name, err)
		}
		r := NewResolver(table)
		if r.Salted() != (table.Salt != "") {
			t.Errorf("table %s: Salted() = %v with salt %q", tb.Name, r.Salted(), table.Salt)
		}
		for i, c := range tb.Cases {
			total++
			t.Run(fmt.Sprintf("%s/%d %s", tb.Name, i, c.Why), func(t *testing.T) {
				if !r.Salted() && c.Draw == "" {
					t.Fatal("a case of a table without salt has no draw")
				}
				addr := netip.MustParseAddr(c.Addr)
				if c.CohortDraw != "" {
					if got := CohortDraw(r.k0, r.k1, addr, table.Version); got != hex64(t, c.CohortDraw) {
						t.Errorf("cohort draw %016x, want %s", got, c.CohortDraw)
					}
				}
				got := r.Decide(Conn{Addr: addr, SNI: c.SNI, Device: c.Device}, hex64(t, c.Draw))
				want := Decision{Config: c.Config, P: c.P, Holdback: c.Holdback}
				if c.Group != nil {
					want.Group = *c.Group
				}
				if got.Group != want.Group || got.Config != want.Config || !near(got.P, want.P) || got.Holdback != want.Holdback {
					t.Fatalf("Decide(%s sni=%q device=%q, draw=%s) = %+v, want %+v", c.Addr, c.SNI, c.Device, c.Draw, got, want)
				}
				passed++
			})
		}
	}
	t.Logf("rules.Decide: %d of %d decide.json cases passed", passed, total)
}

// TestDecideMarginals: over many per-connection draws, the share of
// connections of a context that get a configuration is the p logged for
// it, and the held-back share is the table's holdback (the logged p is a
// true marginal probability, as inverse-propensity estimates need).
func TestDecideMarginals(t *testing.T) {
	table, _ := vectorTable(t, "per-connection")
	r := NewResolver(table)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	for _, addr := range []string{"10.9.9.9", "10.1.2.7", "2001:db8::1", "192.0.2.1"} {
		counts, logged, held := map[string]int{}, map[string]float64{}, 0
		for range n {
			d := r.Decide(Conn{Addr: netip.MustParseAddr(addr)}, rng.Uint64())
			counts[d.Config]++
			if p, ok := logged[d.Config]; ok && p != d.P {
				t.Fatalf("%s: config %s logged with p %v and %v", addr, d.Config, p, d.P)
			}
			logged[d.Config] = d.P
			if d.Holdback {
				held++
			}
		}
		for cfg, k := range counts {
			share, p := float64(k)/n, logged[cfg]
			if sd := math.Sqrt(p * (1 - p) / n); math.Abs(share-p) > 5*sd+1e-12 {
				t.Errorf("%s: config %s in %.4f of connections, logged p %.4f", addr, cfg, share, p)
			}
		}
		if share, h := float64(held)/n, table.Holdback; math.Abs(share-h) > 5*math.Sqrt(h*(1-h)/n) {
			t.Errorf("%s: %.4f held back, table holdback %.2f", addr, share, h)
		}
	}
}

// TestDecideIPv4Mapped: an IPv4-mapped address is its IPv4 client, for
// rules and for the cohort.
func TestDecideIPv4Mapped(t *testing.T) {
	table, _ := vectorTable(t, "cohorts")
	r := NewResolver(table)
	for i := range 256 {
		v4 := netip.AddrFrom4([4]byte{10, 1, 2, byte(i)})
		mapped := netip.AddrFrom16(v4.As16())
		if a, b := r.Decide(Conn{Addr: v4}, 0), r.Decide(Conn{Addr: mapped}, 0); a != b {
			t.Fatalf("%s: %+v, mapped %+v", v4, a, b)
		}
	}
}

func TestSaltSchema(t *testing.T) {
	_, doc := vectorTable(t, "cohorts")
	cases := []struct{ salt, want string }{
		{`"000102030405060708090a0b0c0d0e0f"`, ""},
		{`7`, "7 is not of type 'string'"},
		{`""`, "'' does not match '^[0-9a-f]{32}$'"},
		{`"000102030405060708090a0b0c0d0e0f0"`, "does not match '^[0-9a-f]{32}$'"},
		{`"g00102030405060708090a0b0c0d0e0f"`, "does not match '^[0-9a-f]{32}$'"},
	}
	for _, c := range cases {
		text := strings.Replace(string(doc), `"000102030405060708090a0b0c0d0e0f"`, c.salt, 1)
		table, err := Parse([]byte(text), registry(t))
		switch {
		case c.want == "" && (err != nil || table.Salt != "000102030405060708090a0b0c0d0e0f"):
			t.Errorf("salt %s: %v, salt %q", c.salt, err, table.Salt)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), "field salt: ") || !strings.Contains(err.Error(), c.want)):
			t.Errorf("salt %s: got %v, want field salt with %q", c.salt, err, c.want)
		}
	}
}

func TestInvalidVectors(t *testing.T) {
	var v struct {
		Cases map[string]struct {
			Field    string          `json:"field"`
			Contains string          `json:"contains"`
			Table    json.RawMessage `json:"table"`
			Raw      *string         `json:"raw"`
		} `json:"cases"`
	}
	readVectors(t, "invalid.json", &v)
	names := make([]string, 0, len(v.Cases))
	for n := range v.Cases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		c := v.Cases[name]
		t.Run(name, func(t *testing.T) {
			doc := []byte(c.Table)
			if c.Raw != nil {
				doc = []byte(*c.Raw)
			}
			if len(doc) == 0 {
				t.Fatal("case has neither table nor raw")
			}
			_, err := Parse(doc, registry(t))
			var fe *FieldError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidTable) {
				t.Fatalf("want a *FieldError, got %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "field "+c.Field) || !strings.Contains(msg, c.Contains) {
				t.Fatalf("error %q does not name field %q with %q", msg, c.Field, c.Contains)
			}
		})
	}
}

func TestCompileDropsSNIAndDeviceRules(t *testing.T) {
	table, _ := vectorTable(t, "cohorts")
	c, err := Compile(table, registry(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Prefixes) != 3 || len(c.Ignored) != 4 {
		t.Fatalf("prefixes %v ignored %v: want 3 TCP-layer rules and 4 ignored", c.Prefixes, c.Ignored)
	}
	if !c.Salted || c.K0 != 0x0706050403020100 || c.K1 != 0x0f0e0d0c0b0a0908 || c.HoldThr != 1<<30 {
		t.Fatalf("salted %v k0 %x k1 %x holdback threshold %d", c.Salted, c.K0, c.K1, c.HoldThr)
	}
	fast := c.Groups[0] // 0.75 bbr32, 0.25 default; holdback 0.25
	if fast.Cum[0] != 3<<30 || fast.Cum[1] != 1<<32 || c.Configs[c.Default].ID != table.Default ||
		!near(fast.P[0], 0.5625) || !near(fast.P[1], 0.4375) || !near(fast.PHeld, 0.4375) {
		t.Fatalf("group fast %+v / default %d", fast, c.Default)
	}
	if slow := c.Groups[1]; !near(slow.PHeld, 0.25) || !near(slow.P[0], 0.75) {
		t.Fatalf("group slow %+v", slow)
	}
}

func TestCompileRejectsTooManyChoices(t *testing.T) {
	table, _ := vectorTable(t, "per-connection")
	for i := 0; i < MaxChoices+1; i++ {
		table.Groups[1].Choices = append(table.Groups[1].Choices, Choice{Config: table.Default, P: 0})
	}
	var ue *UnsupportedError
	if _, err := Compile(table, registry(t)); !errors.As(err, &ue) || !strings.Contains(err.Error(), "groups[1].choices") {
		t.Fatalf("want UnsupportedError naming groups[1].choices, got %v", err)
	}
}

func TestParseExtraCases(t *testing.T) {
	cases := []struct{ name, mutate, field, contains string }{
		{"not json", "{", "(root)", "not JSON"},
		{"missing rules", `"rules"`, "(root)", "'rules' is a required property"},
		{"p zero", `"p": 0.25`, "groups[0].choices[1].p", "less than or equal to the minimum"},
		{"trailing data", "trailing", "(root)", "not JSON"},
		{"bare address", `"10.0.0.0/8"|"10.0.0.0"`, "rules[0].prefix", "is not a canonical prefix (write '10.0.0.0/32')"},
		{"garbage prefix", `"10.0.0.0/8"|"nope/8"`, "rules[0].prefix", "'nope/8' does not appear to be an IPv4 or IPv6 network"},
		{"netmask host bits", `"10.0.0.0/8"|"10.0.0.1/255.0.0.0"`, "rules[0].prefix", "has host bits set"},
		{"float version", `"version": 7|"version": 1e20`, "version", "greater than the maximum of 9007199254740991"},
		{"fractional version", `"version": 7|"version": 7.5`, "version", "is not of type 'integer'"},
		{"generated_at 1e999", `"generated_at": 1795000000.0|"generated_at": 1e999`, "generated_at", "greater than the maximum"},
		{"device control", `"device": "android"|"device": "a\u001b[31m"`, "rules[2].device", `'a\x1b[31m' does not match`},
	}
	_, raw := vectorTable(t, "per-connection")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := string(raw)
			switch c.mutate {
			case "{":
				doc = "{"
			case "trailing":
				doc += " {}"
			case `"rules"`:
				doc = strings.Replace(doc, `"rules"`, `"rulez"`, 1)
			default:
				if from, to, ok := strings.Cut(c.mutate, "|"); ok {
					if !strings.Contains(doc, from) {
						t.Fatalf("decide.json's table has no %s", from)
					}
					doc = strings.Replace(doc, from, to, 1)
				} else {
					doc = strings.Replace(doc, c.mutate, `"p": 0`, 1)
				}
			}
			_, err := Parse([]byte(doc), registry(t))
			if err == nil || !strings.Contains(err.Error(), "field "+c.field) || !strings.Contains(err.Error(), c.contains) {
				t.Fatalf("got %v, want field %s with %q", err, c.field, c.contains)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
