package rules

import (
	"bufio"
	"encoding/json"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// corpusDecision is one line of decisions.jsonl: a connection to decide in
// a table of the corpus and what tailor.table.decide gave it.
type corpusDecision struct {
	Table string `json:"table"`
	Cases []struct {
		Addr, SNI, Device, Draw, Group, Config string
		P                                      float64
		Holdback                               bool
	} `json:"cases"`
}

// TestTableCorpus parses a directory of tables written by tests/test_table_corpus.py
// (TAILOR_TABLE_CORPUS): every accept-*.json must parse (the manager published it,
// or Python accepted it), every reject-*.json must be refused (Python refused it),
// and every decision in decisions.jsonl must be what rules.Decide gives.
func TestTableCorpus(t *testing.T) {
	dir := os.Getenv("TAILOR_TABLE_CORPUS")
	if dir == "" {
		t.Skip("TAILOR_TABLE_CORPUS not set (tests/test_table_corpus.py sets it)")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tables in %s: %v", dir, err)
	}
	sort.Strings(files)
	reg := registry(t)
	accepted, rejected := 0, 0
	tables := map[string]*Table{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		tbl, perr := Parse(data, reg)
		switch {
		case strings.HasPrefix(name, "accept-"):
			if perr != nil {
				t.Errorf("%s: Python accepts it, Go refuses: %v", name, perr)
				continue
			}
			tables[name] = tbl
			accepted++
		case strings.HasPrefix(name, "reject-"):
			if perr == nil {
				t.Errorf("%s: Python refuses it, Go accepts it", name)
				continue
			}
			rejected++
		}
	}
	agree := corpusDecisions(t, filepath.Join(dir, "decisions.jsonl"), tables)
	t.Logf("accepted %d, rejected %d, decisions %d agree", accepted, rejected, agree)
}

func corpusDecisions(t *testing.T, path string, tables map[string]*Table) int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	agree := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var line corpusDecision
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		tbl := tables[line.Table]
		if tbl == nil {
			t.Errorf("%s: decisions for a table Go did not accept", line.Table)
			continue
		}
		res := NewResolver(tbl)
		for _, c := range line.Cases {
			draw, err := strconv.ParseUint(c.Draw, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Decide(Conn{Addr: netip.MustParseAddr(c.Addr), SNI: c.SNI, Device: c.Device}, draw)
			if got.Group != c.Group || got.Config != c.Config || got.Holdback != c.Holdback || math.Abs(got.P-c.P) > 1e-12 {
				t.Errorf("%s: %s sni=%q device=%q draw=%s: Go %+v, Python %+v", line.Table, c.Addr, c.SNI, c.Device, c.Draw, got, c)
				continue
			}
			agree++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return agree
}
