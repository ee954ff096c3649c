// Package agentbench holds tailor-agent's benchmarks (run through
// `tailor-agent bench`, driven by bench/agent/run.sh): LPM lookup cost with
// BPF_PROG_RUN, per-callback cost and loopback connections per second.
package agentbench

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/tailor-project/tailor/edge/internal/bpf"
)

// poolSize matches POOL in lpmbench.bpf.c.
const poolSize = 65536

// LPMResult is the cost of one lookup in a trie of Prefixes entries.
type LPMResult struct {
	Prefixes    int     `json:"prefixes"`
	NsPerLookup float64 `json:"ns_per_lookup"`
	BaselineNs  float64 `json:"baseline_ns"` // pool read and loop overhead, subtracted
}

// LPM measures lookups of random v4-mapped keys (half inside inserted
// prefixes) in tries of each size, `loops` lookups per program run.
func LPM(sizes []int, loops uint32, repeat int, seed uint64) ([]LPMResult, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, err
	}
	var out []LPMResult
	for _, n := range sizes {
		r, err := lpmOnce(n, loops, repeat, rand.New(rand.NewPCG(seed, uint64(n))))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func lpmOnce(n int, loops uint32, repeat int, rng *rand.Rand) (LPMResult, error) {
	look, err := loadLPM(loops, 0, nil)
	if err != nil {
		return LPMResult{}, err
	}
	defer look.Close()
	prefixes := fillTrie(look.BenchTrie, n, rng)
	if err := fillPool(look.BenchPool, prefixes, rng); err != nil {
		return LPMResult{}, err
	}
	base, err := loadLPM(loops, 1, look.BenchPool)
	if err != nil {
		return LPMResult{}, err
	}
	defer base.Close()
	tl, err := runNs(look.LpmBench, repeat)
	if err != nil {
		return LPMResult{}, err
	}
	tb, err := runNs(base.LpmBench, repeat)
	if err != nil {
		return LPMResult{}, err
	}
	per := float64(loops)
	return LPMResult{Prefixes: n, NsPerLookup: (tl - tb) / per, BaselineNs: tb / per}, nil
}

func loadLPM(loops, mode uint32, pool *ebpf.Map) (*bpf.LpmbenchObjects, error) {
	spec, err := bpf.LoadLpmbench()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["loops"].Set(loops); err != nil {
		return nil, err
	}
	if err := spec.Variables["mode"].Set(mode); err != nil {
		return nil, err
	}
	opts := &ebpf.CollectionOptions{}
	if pool != nil {
		opts.MapReplacements = map[string]*ebpf.Map{"bench_pool": pool}
	}
	objs := &bpf.LpmbenchObjects{}
	if err := spec.LoadAndAssign(objs, opts); err != nil {
		return nil, fmt.Errorf("agentbench: load lpm bench: %w", err)
	}
	return objs, nil
}

func fillTrie(m *ebpf.Map, n int, rng *rand.Rand) []netip.Prefix {
	var ps []netip.Prefix
	keys := make([]bpf.LpmbenchLpmKey, 0, n)
	vals := make([]uint32, 0, n)
	seen := map[netip.Prefix]bool{}
	for len(keys) < n {
		bits := 16 + rng.IntN(13) // /16../28
		a := netip.AddrFrom4([4]byte{byte(rng.IntN(224)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		p, _ := a.Prefix(bits)
		if seen[p] {
			continue
		}
		seen[p] = true
		ps = append(ps, p)
		keys = append(keys, bpf.LpmbenchLpmKey{Prefixlen: uint32(96 + bits), Addr: p.Addr().As16()})
		vals = append(vals, uint32(len(vals)))
	}
	_, _ = m.BatchUpdate(keys, vals, nil)
	return ps
}

func fillPool(m *ebpf.Map, ps []netip.Prefix, rng *rand.Rand) error {
	keys := make([]uint32, poolSize)
	vals := make([]bpf.LpmbenchLpmKey, poolSize)
	for i := range keys {
		keys[i] = uint32(i)
		a := netip.AddrFrom4([4]byte{byte(rng.IntN(224)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}).As4()
		if i%2 == 0 { // inside an inserted prefix
			b := ps[rng.IntN(len(ps))].Addr().As4()
			a = [4]byte{b[0], b[1], b[2], a[3]}
		}
		vals[i] = bpf.LpmbenchLpmKey{Prefixlen: 128, Addr: netip.AddrFrom4(a).As16()}
	}
	_, err := m.BatchUpdate(keys, vals, nil)
	return err
}

// runNs is the mean run time of one program run over repeat runs.
func runNs(p *ebpf.Program, repeat int) (float64, error) {
	_, d, err := p.Benchmark(make([]byte, 64), repeat, nil)
	if err != nil {
		return 0, fmt.Errorf("agentbench: BPF_PROG_RUN: %w", err)
	}
	return float64(d) / float64(time.Nanosecond), nil
}
