package rules

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestTableCorpus parses a directory of tables written by tests/test_table_corpus.py
// (TAILOR_TABLE_CORPUS): every accept-*.json must parse (the manager published it,
// or Python accepted it), every reject-*.json must be refused (Python refused it).
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
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		_, perr := Parse(data, reg)
		switch {
		case strings.HasPrefix(name, "accept-"):
			if perr != nil {
				t.Errorf("%s: Python accepts it, Go refuses: %v", name, perr)
				continue
			}
			accepted++
		case strings.HasPrefix(name, "reject-"):
			if perr == nil {
				t.Errorf("%s: Python refuses it, Go accepts it", name)
				continue
			}
			rejected++
		}
	}
	t.Logf("accepted %d, rejected %d", accepted, rejected)
}
