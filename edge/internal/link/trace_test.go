package link

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseTrace(t *testing.T) {
	cases := []struct {
		name, in string
		want     []int64
		errSub   string
	}{
		{"simple", "0\n1\n1\n5\n", []int64{0, 1, 1, 5}, ""},
		{"blank lines and spaces", " 3 \n\n4\r\n", []int64{3, 4}, ""},
		{"no trailing newline", "7\n9", []int64{7, 9}, ""},
		{"empty", "", nil, "t.tr: empty"},
		{"only blanks", "\n \n", nil, "t.tr: empty"},
		{"non-numeric", "1\n2\nabc\n", nil, "t.tr:3: \"abc\" is not a non-negative integer"},
		{"float", "1.5\n", nil, "t.tr:1: \"1.5\""},
		{"negative", "1\n-2\n", nil, "t.tr:2: \"-2\""},
		{"decreasing", "1\n5\n4\n", nil, "t.tr:3: timestamp 4 is less than previous 5"},
		{"zero period", "0\n0\n", nil, "last timestamp is 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, err := ParseTrace("t.tr", strings.NewReader(c.in))
			if c.errSub != "" {
				if err == nil || !errors.Is(err, ErrTrace) || !strings.Contains(err.Error(), c.errSub) {
					t.Fatalf("err = %v, want ErrTrace containing %q", err, c.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.MS) != len(c.want) {
				t.Fatalf("got %v, want %v", tr.MS, c.want)
			}
			for i := range c.want {
				if tr.MS[i] != c.want[i] {
					t.Fatalf("got %v, want %v", tr.MS, c.want)
				}
			}
		})
	}
}

func TestLoadTraceFiles(t *testing.T) {
	if _, err := LoadTrace(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrTrace) {
		t.Fatalf("missing file: err = %v", err)
	}
	dir := "../../../data/traces/mahimahi"
	if _, err := os.Stat(dir); err != nil {
		t.Skip("data/traces not present")
	}
	tr, err := LoadTrace(filepath.Join(dir, "TMobile-LTE-short.down"))
	if err != nil {
		t.Fatal(err)
	}
	if m := tr.MeanMbit(); m < 15 || m > 18 {
		t.Fatalf("TMobile-LTE-short.down mean = %.2f Mbit, want ~16.7", m)
	}
}

func TestCapacityPerSecondLoops(t *testing.T) {
	tr := &Trace{MS: []int64{0, 250, 500}} // period 500 ms
	got := tr.CapacityPerSecond(2)
	// loops start at 0, 500, 1000, 1500 ms; the last entry of one loop and
	// the first of the next coincide. Second 0: 0,250,500,500,750.
	// Second 1: 1000,1000,1250,1500,1500,1750.
	want := []int64{5 * OppBytes, 6 * OppBytes}
	if got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v want %v", got, want)
	}
}
