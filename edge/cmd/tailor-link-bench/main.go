// Command tailor-link-bench measures tailor-link's accuracy on this machine
// with real traffic between two namespaces (needs root). It prints a
// markdown table; `tailor-link-bench probe ...` runs one traffic tool.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tailor-project/tailor/edge/internal/bench"
	"github.com/tailor-project/tailor/edge/internal/probe"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "probe" {
		os.Exit(probe.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	traces := flag.String("traces", "../data/traces/mahimahi", "directory holding TMobile-LTE-short.{down,up} (default: the repository's, from edge/)")
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tailor-link-bench:", err)
		os.Exit(1)
	}
	b := &bench.Bench{Probe: self + " probe", Log: os.Stderr}
	err = b.All(*traces)
	b.Markdown(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tailor-link-bench:", err)
		os.Exit(1)
	}
}
