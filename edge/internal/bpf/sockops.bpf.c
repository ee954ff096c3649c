//go:build ignore

// SPDX-License-Identifier: GPL-2.0
// Tailor sock_ops program: per-connection TCP tuning by client prefix, plus
// one telemetry event per connection at close. See ../../cmd/tailor-agent/README.md.
// Which configuration a connection gets, and the probability and holdback
// flag it reports, is spec/decision.md in integers; the agent compiles the
// maps with rules.Decide's pieces (internal/rules/decide.go).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_CHOICES 8
#define MAX_GROUPS 4096
#define MAX_CONFIGS 1024
#define MAX_PREFIXES 262144
#define GROUP_NONE 0xffffffff

// Socket option numbers (not all in the installed uapi headers).
#define SOL_SOCKET 1
#define SO_SNDBUF 7
#define SO_RCVBUF 8
#define SO_MAX_PACING_RATE 47
#define SOL_TCP 6
#define TCP_NODELAY 1
#define TCP_CONGESTION 13
#define TCP_NOTSENT_LOWAT 25
#define TCP_RTO_MAX_MS 44
#define AF_INET 2

// Knob indexes: bit positions in config.set_mask and apply-error counters.
// Go reads both enums from the generated bindings (SockopsKnob*, SockopsCounter*).
enum knob {
	K_CC, K_IW, K_RTO_MIN, K_DELACK_MAX, K_SNDBUF, K_PACING, K_LOWAT,
	K_NODELAY, K_RTO_MAX, K_SYN_RTO, K_RCVBUF, K_CWND_CLAMP, K_NUM
};

// Counters (percpu array): apply errors per knob first, then these.
enum counter {
	C_TUNED = K_NUM, C_MISS, C_EVENTS, C_EVENTS_LOST, C_STORAGE_FAIL,
	C_PENDING_HIT, C_HOLDBACK, C_NUM
};

struct lpm_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct config {
	__u64 id40;             // config id "c-<10 hex>" as a 40-bit number
	char cc[16];            // congestion control name, NUL-terminated
	__u32 set_mask;         // bit k: knob k is applied
	__u32 iw;               // segments
	__u32 rto_min_us;
	__u32 delack_max_us;
	__u32 rto_max_ms;
	__u32 syn_rto_jiffies;  // converted with the system HZ in userspace
	__u32 sndbuf;
	__u32 pacing;           // bytes/s
	__u32 lowat;
	__u32 nodelay;
	__u32 rcvbuf;
	__u32 cwnd_clamp;       // segments
};

struct group {
	__u32 n;
	__u32 p_nano_held;       // logged p x 1e9 of a held-back connection (the default)
	__u64 cum[MAX_CHOICES];  // floor(cumulative p x 2^32), the last one 2^32
	__u32 cfg[MAX_CHOICES];  // config index in this generation
	__u32 p_nano[MAX_CHOICES]; // logged p x 1e9 of each choice when treated
};

struct meta {
	__u64 version;           // the table's version (0 = none installed)
	__u32 holdback;          // floor(holdback share x 2^32) (0 = none)
	__u32 default_cfg;
	__u32 syn_rto_any;       // some config sets the SYN-ACK RTO
	__u32 salted;            // 1: per-client cohort draws; 0: per-connection draws
	__u64 k0;                // SipHash key of the table's salt (bytes 0-7, little-endian)
	__u64 k1;                // bytes 8-15
};

struct pending_key {
	__u8 raddr[16];
	__u8 laddr[16];
	__u32 rport;
	__u32 lport;
};

struct conn {
	__u64 start_ns;
	__u64 max_rate;          // bytes/s, maximum over RTT_CB samples
	__u64 id40;
	__u64 version;
	__u32 group;
	__u32 cfg;
	__u32 p_nano;
	__u8 holdback;
	__u8 pad[3];
};

struct event {
	__u8 raddr[16];
	__u64 close_ns;
	__u64 duration_ns;
	__u64 bytes_acked;
	__u64 bytes_sent;
	__u64 bytes_retrans;
	__u64 max_rate;
	__u64 id40;
	__u64 version;
	__u32 srtt_us;
	__u32 min_rtt_us;
	__u32 retransmits;
	__u32 delivered;
	__u32 cwnd;
	__u32 mss;
	__u32 group;
	__u32 cfg;
	__u32 p_nano;
	__u16 rport;
	__u8 family;
	__u8 holdback;
	char cc[16];
};

// CO-RE view of the few tcp_sock fields the sock_ops context lacks.
struct tcp_sock {
	__u64 bytes_sent;
	__u64 bytes_retrans;
	__u32 delivered;
} __attribute__((preserve_access_index));

// Set at load time by the agent.
const volatile __u32 telemetry_on = 1;
const volatile __u32 track_rate = 1;
const volatile __u32 wake_bytes = 65536;
const volatile __u32 cost_hist = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} active SEC(".maps");

struct lpm_inner {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_PREFIXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_key);
	__type(value, __u32);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct lpm_inner);
} prefixes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_GROUPS);
	__type(key, __u32);
	__type(value, struct group);
} groups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_CONFIGS);
	__type(key, __u32);
	__type(value, struct config);
} configs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct meta);
} metas SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pending_key);
	__type(value, __u64);    // the per-connection draw of TIMEOUT_INIT
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct conn);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_NUM);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

#define HIST_BUCKETS 64
#define HIST_NS 64
// Per-callback cost histogram: [0] established, [1] close; bucket = ns / HIST_NS.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} cost SEC(".maps");

const struct event *unused_event __attribute__((unused));
const struct lpm_key *unused_key __attribute__((unused));
// Keep both enums in BTF so bpf2go emits them for Go (-type knob -type counter).
const enum knob *unused_knob __attribute__((unused));
const enum counter *unused_counter __attribute__((unused));

// Volatile context reads stop clang from merging loads of different
// fields into one load through a computed ctx pointer (verifier rejects it).
#define CTX(f) (*(volatile __u32 *)&skops->f)

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline void record_cost(__u32 which, __u64 t0)
{
	__u32 b = (bpf_ktime_get_ns() - t0) / HIST_NS;
	if (b >= HIST_BUCKETS)
		b = HIST_BUCKETS - 1;
	__u32 idx = which * HIST_BUCKETS + b;
	__u64 *v = bpf_map_lookup_elem(&cost, &idx);
	if (v)
		*v += 1;
}

// Both families' fields are read unconditionally: loads in two branches
// would be merged by clang into one load through a computed ctx pointer,
// which the verifier rejects.
#define ADDR_OF(skops, side, a) do {                                     \
	__u32 fam = CTX(family), v4 = CTX(side##_ip4);                     \
	__u32 x0 = CTX(side##_ip6[0]), x1 = CTX(side##_ip6[1]);            \
	__u32 x2 = CTX(side##_ip6[2]), x3 = CTX(side##_ip6[3]);            \
	__u32 *w = (__u32 *)(a);                                           \
	int is4 = fam == AF_INET;                                          \
	w[0] = is4 ? 0 : x0;                                               \
	w[1] = is4 ? 0 : x1;                                               \
	w[2] = is4 ? bpf_htonl(0xffff) : x2;                               \
	w[3] = is4 ? v4 : x3;                                              \
} while (0)

static __always_inline void remote_addr(struct bpf_sock_ops *skops, __u8 a[16])
{
	ADDR_OF(skops, remote, a);
}

static __always_inline void local_addr(struct bpf_sock_ops *skops, __u8 a[16])
{
	ADDR_OF(skops, local, a);
}

static __always_inline void pending_key_of(struct bpf_sock_ops *skops, struct pending_key *k)
{
	remote_addr(skops, k->raddr);
	local_addr(skops, k->laddr);
	k->rport = CTX(remote_port);
	k->lport = CTX(local_port);
}

// The per-connection decision: which config of which group, in which table.
struct choice {
	struct config *cfg;
	__u64 version;
	__u32 group;
	__u32 cfg_idx;
	__u32 p_nano;
	__u8 holdback;
	__u8 matched;
};

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND do {                                                    \
	v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);         \
	v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                             \
	v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                             \
	v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);         \
} while (0)

// SipHash-2-4 state (rules.SipHash24 in Go).
struct sip {
	__u64 v0, v1, v2, v3;
};

static __always_inline void sip_init(struct sip *s, __u64 k0, __u64 k1)
{
	s->v0 = k0 ^ 0x736f6d6570736575ULL;
	s->v1 = k1 ^ 0x646f72616e646f6dULL;
	s->v2 = k0 ^ 0x6c7967656e657261ULL;
	s->v3 = k1 ^ 0x7465646279746573ULL;
}

// sip_block compresses one little-endian 64-bit message word (2 rounds).
static __always_inline void sip_block(struct sip *s, __u64 m)
{
	__u64 v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
	v3 ^= m; SIPROUND; SIPROUND; v0 ^= m;
	s->v0 = v0; s->v1 = v1; s->v2 = v2; s->v3 = v3;
}

// sip_final compresses the length block of a message of n = 8k bytes (no
// tail bytes: b = n << 56) and finalizes (4 rounds).
static __always_inline __u64 sip_final(struct sip *s, __u64 n)
{
	sip_block(s, n << 56);
	__u64 v0 = s->v0, v1 = s->v1, v2 = s->v2 ^ 0xff, v3 = s->v3;
	SIPROUND; SIPROUND; SIPROUND; SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

// The client's cohort draw (spec/decision.md; rules.CohortDraw in Go): the
// high half of H = SipHash(salt, unit), the low half of A = SipHash(salt,
// unit || version as 8 bytes little-endian). Both messages start with the
// unit's two words, so the state after them is computed once: 18 rounds in
// all instead of 22. The unit of a remote address in its 16-byte form: an
// IPv4 client (AF_INET, or a v4-mapped AF_INET6 peer: both are
// ::ffff:a.b.c.d here) is the whole mapped address, an IPv6 client its /64.
static __always_inline __u64 cohort_draw(struct meta *m, const __u8 a[16])
{
	const __u32 *w = (const __u32 *)a; // 4-byte aligned (lpm_key.addr): no 8-byte loads
	__u64 m0 = w[0] | (__u64)w[1] << 32, m1 = w[2] | (__u64)w[3] << 32; // little-endian words (bpfel)
	if (!(w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff)))
		m1 = 0;
	struct sip s, t;
	sip_init(&s, m->k0, m->k1);
	sip_block(&s, m0);
	sip_block(&s, m1);
	t = s;
	sip_block(&t, m->version);
	__u64 hold = sip_final(&s, 16), arm = sip_final(&t, 24);
	return (hold & 0xffffffff00000000ULL) | (arm & 0xffffffffULL);
}

static __always_inline int pick(struct group *g, __u32 lo, __u32 *idx)
{
	__u32 n = g->n;
	if (n == 0 || n > MAX_CHOICES)
		return -1;
	for (int i = 0; i < MAX_CHOICES; i++) {
		if (i >= n)
			break;
		if ((__u64)lo < g->cum[i] || i == n - 1) {
			*idx = i;
			return 0;
		}
	}
	return -1;
}

// active_meta is the installed table's meta and generation (NULL: none).
static __always_inline struct meta *active_meta(__u32 *gen)
{
	__u32 zero = 0;
	__u32 *genp = bpf_map_lookup_elem(&active, &zero);
	if (!genp)
		return 0;
	*gen = *genp & 1;
	struct meta *m = bpf_map_lookup_elem(&metas, gen);
	if (!m || m->version == 0)
		return 0;
	return m;
}

// resolve is spec/decision.md with sni and device unknown: holdback from
// the draw's high half (every client), the group by longest prefix, then
// the default (no group, or held back) or the choice the low half picks.
// draw is the per-connection draw, replaced by the cohort draw under a salt.
static __always_inline int resolve(struct bpf_sock_ops *skops, __u32 gen, struct meta *m, __u64 draw, struct choice *c)
{
	struct lpm_key key = {.prefixlen = 128};
	remote_addr(skops, key.addr);
	if (m->salted)
		draw = cohort_draw(m, key.addr);
	c->version = m->version;
	c->group = GROUP_NONE;
	c->p_nano = 1000000000;
	c->holdback = (__u32)(draw >> 32) < m->holdback;
	c->matched = 0;
	__u32 cfg = m->default_cfg;
	void *trie = bpf_map_lookup_elem(&prefixes, &gen);
	if (!trie)
		return -1;
	__u32 *gi = bpf_map_lookup_elem(trie, &key);
	if (gi && *gi != GROUP_NONE) {
		__u32 gk = gen * MAX_GROUPS + (*gi % MAX_GROUPS);
		struct group *g = bpf_map_lookup_elem(&groups, &gk);
		if (!g)
			return -1;
		c->group = *gi;
		c->matched = 1;
		if (c->holdback) {
			c->p_nano = g->p_nano_held;
		} else {
			__u32 i = 0;
			if (pick(g, (__u32)draw, &i) < 0)
				return -1;
			i &= MAX_CHOICES - 1;
			cfg = g->cfg[i];
			c->p_nano = g->p_nano[i];
		}
	}
	c->cfg_idx = cfg;
	__u32 ck = gen * MAX_CONFIGS + (cfg % MAX_CONFIGS);
	c->cfg = bpf_map_lookup_elem(&configs, &ck);
	return c->cfg ? 0 : -1;
}

static __always_inline __u64 fresh_draw(void)
{
	return ((__u64)bpf_get_prandom_u32() << 32) | bpf_get_prandom_u32();
}

// take_draw returns the draw made at TIMEOUT_INIT for this 4-tuple, or a
// fresh one (per-connection draws: tables without a salt).
static __always_inline __u64 take_draw(struct bpf_sock_ops *skops)
{
	struct pending_key k = {};
	pending_key_of(skops, &k);
	__u64 *p = bpf_map_lookup_elem(&pending, &k);
	if (p) {
		__u64 d = *p;
		bpf_map_delete_elem(&pending, &k);
		count(C_PENDING_HIT);
		return d;
	}
	return fresh_draw();
}

static __always_inline void setopt(struct bpf_sock_ops *skops, int level, int opt, int val, __u32 knob)
{
	if (bpf_setsockopt(skops, level, opt, &val, sizeof(val)))
		count(knob);
}

static __always_inline void apply(struct bpf_sock_ops *skops, struct config *c)
{
	__u32 m = c->set_mask;
	if (m & (1 << K_CC)) {
		char cc[16];
		__builtin_memcpy(cc, c->cc, sizeof(cc));
		cc[15] = 0;
		if (bpf_setsockopt(skops, SOL_TCP, TCP_CONGESTION, cc, sizeof(cc)))
			count(K_CC);
	}
	if (m & (1 << K_IW))
		setopt(skops, SOL_TCP, TCP_BPF_IW, c->iw, K_IW);
	// The clamp (which also sets ssthresh) bounds growth only; the first
	// flight is the window set above or the kernel's, so lower it too.
	if (m & (1 << K_CWND_CLAMP)) {
		__u32 iw = (m & (1 << K_IW)) ? c->iw : CTX(snd_cwnd);
		setopt(skops, SOL_TCP, TCP_BPF_SNDCWND_CLAMP, c->cwnd_clamp, K_CWND_CLAMP);
		if (iw > c->cwnd_clamp)
			setopt(skops, SOL_TCP, TCP_BPF_IW, c->cwnd_clamp, K_CWND_CLAMP);
	}
	if (m & (1 << K_RTO_MIN))
		setopt(skops, SOL_TCP, TCP_BPF_RTO_MIN, c->rto_min_us, K_RTO_MIN);
	if (m & (1 << K_DELACK_MAX))
		setopt(skops, SOL_TCP, TCP_BPF_DELACK_MAX, c->delack_max_us, K_DELACK_MAX);
	if (m & (1 << K_SNDBUF))
		setopt(skops, SOL_SOCKET, SO_SNDBUF, c->sndbuf, K_SNDBUF);
	if (m & (1 << K_RCVBUF))
		setopt(skops, SOL_SOCKET, SO_RCVBUF, c->rcvbuf, K_RCVBUF);
	if (m & (1 << K_PACING))
		setopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, c->pacing, K_PACING);
	if (m & (1 << K_LOWAT))
		setopt(skops, SOL_TCP, TCP_NOTSENT_LOWAT, c->lowat, K_LOWAT);
	if (m & (1 << K_NODELAY))
		setopt(skops, SOL_TCP, TCP_NODELAY, c->nodelay, K_NODELAY);
	if (m & (1 << K_RTO_MAX))
		setopt(skops, SOL_TCP, TCP_RTO_MAX_MS, c->rto_max_ms, K_RTO_MAX);
}

// Only tables that set a SYN-ACK RTO decide this early. Without a salt
// the draw is kept in pending for ESTABLISHED to reuse; with one the
// decision is a function of the client, so ESTABLISHED recomputes it.
static __always_inline int on_timeout_init(struct bpf_sock_ops *skops)
{
	__u32 gen = 0;
	struct meta *m = active_meta(&gen);
	if (!m || !m->syn_rto_any)
		return -1;
	__u64 draw = m->salted ? 0 : fresh_draw();
	struct choice c = {};
	if (resolve(skops, gen, m, draw, &c) < 0)
		return -1;
	if (!m->salted) {
		struct pending_key k = {};
		pending_key_of(skops, &k);
		bpf_map_update_elem(&pending, &k, &draw, BPF_ANY);
	}
	if (!(c.cfg->set_mask & (1 << K_SYN_RTO)))
		return -1;
	return c.cfg->syn_rto_jiffies;
}

static __always_inline void on_established(struct bpf_sock_ops *skops)
{
	__u64 t0 = bpf_ktime_get_ns();
	__u32 gen = 0;
	struct meta *m = active_meta(&gen);
	if (!m)
		return;
	__u64 draw = m->salted ? 0 : take_draw(skops);
	struct choice c = {};
	if (resolve(skops, gen, m, draw, &c) < 0)
		return;
	apply(skops, c.cfg);
	count(C_TUNED);
	if (!c.matched)
		count(C_MISS);
	if (c.holdback)
		count(C_HOLDBACK);
	struct bpf_sock *sk = skops->sk;
	if (telemetry_on && sk) {
		struct conn *s = bpf_sk_storage_get(&conns, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!s) {
			count(C_STORAGE_FAIL);
		} else {
			s->start_ns = t0;
			s->max_rate = 0;
			s->id40 = c.cfg->id40;
			s->version = c.version;
			s->group = c.group;
			s->cfg = c.cfg_idx;
			s->p_nano = c.p_nano;
			s->holdback = c.holdback;
			__u32 flags = BPF_SOCK_OPS_STATE_CB_FLAG;
			if (track_rate)
				flags |= BPF_SOCK_OPS_RTT_CB_FLAG;
			bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | flags);
		}
	}
	if (cost_hist)
		record_cost(0, t0);
}

static __always_inline void on_rtt(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	if (!sk || !skops->rate_interval_us)
		return;
	struct conn *s = bpf_sk_storage_get(&conns, sk, 0, 0);
	if (!s)
		return;
	__u64 rate = (__u64)skops->rate_delivered * skops->mss_cache * 1000000 / skops->rate_interval_us;
	if (rate > s->max_rate)
		s->max_rate = rate;
}

static __always_inline void fill_event(struct bpf_sock_ops *skops, struct bpf_sock *sk, struct conn *s, struct event *e, __u64 now)
{
	remote_addr(skops, e->raddr);
	e->family = skops->family;
	e->rport = bpf_ntohl(skops->remote_port) >> 16;
	e->close_ns = now;
	e->duration_ns = now - s->start_ns;
	e->srtt_us = skops->srtt_us >> 3;
	e->min_rtt_us = skops->rtt_min;
	e->bytes_acked = skops->bytes_acked;
	e->retransmits = skops->total_retrans;
	e->cwnd = skops->snd_cwnd;
	e->mss = skops->mss_cache;
	e->max_rate = s->max_rate;
	e->id40 = s->id40;
	e->version = s->version;
	e->group = s->group;
	e->cfg = s->cfg;
	e->p_nano = s->p_nano;
	e->holdback = s->holdback;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		e->bytes_sent = tp->bytes_sent;
		e->bytes_retrans = tp->bytes_retrans;
		e->delivered = tp->delivered;
	}
	bpf_getsockopt(skops, SOL_TCP, TCP_CONGESTION, e->cc, sizeof(e->cc));
}

static __always_inline void on_close(struct bpf_sock_ops *skops)
{
	__u64 t0 = bpf_ktime_get_ns();
	struct bpf_sock *sk = skops->sk;
	if (!sk)
		return;
	struct conn *s = bpf_sk_storage_get(&conns, sk, 0, 0);
	if (!s)
		return;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(C_EVENTS_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	fill_event(skops, sk, s, e, t0);
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wake_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	bpf_sk_storage_delete(&conns, sk);
	count(C_EVENTS);
	if (cost_hist)
		record_cost(1, t0);
}

SEC("sockops")
int tailor_sockops(struct bpf_sock_ops *skops)
{
	int rv = -1;
	switch (skops->op) {
	case BPF_SOCK_OPS_TIMEOUT_INIT:
		rv = on_timeout_init(skops);
		break;
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		on_established(skops);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		on_rtt(skops);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] == BPF_TCP_CLOSE)
			on_close(skops);
		break;
	}
	skops->reply = rv;
	return 1;
}

char _license[] SEC("license") = "GPL";
