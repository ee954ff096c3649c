//go:build ignore

// SPDX-License-Identifier: GPL-2.0
// LPM lookup microbenchmark: an XDP program run with BPF_PROG_RUN that looks
// up `loops` keys from a pool in a trie shaped like the agent's (16-byte
// v4-mapped keys). mode 0 = lookup, mode 1 = baseline (pool read only).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define POOL 65536

struct lpm_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u32);
} bench_trie SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, POOL);
	__type(key, __u32);
	__type(value, struct lpm_key);
} bench_pool SEC(".maps");

const volatile __u32 loops = 1000;
const volatile __u32 mode = 0;
__u64 hits;

static long one(__u64 i, void *ctx)
{
	__u32 k = (__u32)i % POOL;
	struct lpm_key *key = bpf_map_lookup_elem(&bench_pool, &k);
	if (!key)
		return 0;
	if (mode == 0 && bpf_map_lookup_elem(&bench_trie, key))
		__sync_fetch_and_add(&hits, 1);
	return 0;
}

SEC("xdp")
int lpm_bench(struct xdp_md *ctx)
{
	bpf_loop(loops, one, 0, 0);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
