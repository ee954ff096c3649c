package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tailor-project/tailor/edge/internal/agent/agentbench"
)

// benchCmd: `bench lpm`, `bench conn`, and the hidden `bench serve ADDR`.
func benchCmd(args []string) error {
	if len(args) < 1 {
		return errors.New("bench needs lpm, conn or serve")
	}
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	sizes := fs.String("sizes", "1000,10000,100000", "trie sizes (lpm)")
	loops := fs.Uint("loops", 1000, "lookups per program run (lpm)")
	repeat := fs.Int("repeat", 2000, "program runs per size (lpm)")
	clients := fs.Int("clients", 4, "parallel clients (conn)")
	dur := fs.Duration("duration", 4*time.Second, "duration of each run (conn)")
	addr := fs.String("addr", "127.0.0.1:18080", "loopback server address (conn)")
	_ = fs.Parse(args[1:])
	var res any
	var err error
	switch args[0] {
	case "serve":
		return agentbench.Serve(fs.Arg(0))
	case "lpm":
		res, err = agentbench.LPM(parseSizes(*sizes), uint32(*loops), *repeat, 1)
	case "conn":
		self, _ := os.Executable()
		res, err = agentbench.Conn(agentbench.ConnSpec{Addr: *addr, Clients: *clients, Duration: *dur, Self: self})
	default:
		return fmt.Errorf("unknown bench %q", args[0])
	}
	if res != nil {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Println(string(b))
	}
	return err
}

func parseSizes(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}
