"""Write spec/vectors/decision-table/decide.json: the shared vectors of spec/decision.md.

Run from the repository root: ``PYTHONPATH=src .venv/bin/python scripts/decision_vectors.py``. The
expected outcomes come from tailor.table.decide; what makes them a cross-check is that Go's rules.Decide
and the sock_ops program are written independently against spec/decision.md, and the SipHash cases are
the reference implementation's published vectors (key 00..0f, message 00..len-1).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tailor.space import Configuration
from tailor.table import DecisionTable, decide, validate_table
from tailor.table.decide import cohort_draw, cohort_unit, holdback_threshold, siphash24, thresholds

OUT = Path("spec/vectors/decision-table/decide.json")
SIPHASH_REFERENCE = {0: 0x726FDB47DD0E0E31, 1: 0x74F839C593DC67FD, 8: 0x93F5F5799A932462,
                     15: 0xA129CA6149BE45E5, 16: 0x3F2ACC7F57C29BDB}


def cid(knobs: dict) -> str:
    return Configuration(knobs).id


DEFAULT = cid({})
BBR32 = {"http.version": "2", "tcp.congestion_control": "bbr", "tcp.initial_cwnd": 32}
IW4 = {"tcp.initial_cwnd": 4, "tcp.rto_min_ms": 50}
RENO = {"http2.max_concurrent_streams": 256, "tcp.congestion_control": "reno", "tcp.syn_rto_ms": 300}
H2ONLY = {"http.version": "2"}
CONFIGS = {cid(k): k for k in ({}, BBR32, IW4, RENO, H2ONLY)}


def table(name: str, holdback: float, salt: str | None, groups: list, rules: list) -> dict:
    doc = {"schema": "tailor.decision-table/v1", "version": 7, "generated_at": 1795000000.0, "valid_for_s": 600,
           "policy": f"vectors-{name}", "holdback": holdback, "default": DEFAULT, "configs": CONFIGS,
           "groups": groups, "rules": rules}
    if salt:
        doc["salt"] = salt
    return validate_table(doc)


GROUPS = [
    {"id": "fast", "choices": [{"config": cid(BBR32), "p": 0.75}, {"config": DEFAULT, "p": 0.25}]},
    {"id": "slow", "choices": [{"config": cid(IW4), "p": 1.0}]},
    {"id": "slow-mobile-news", "choices": [{"config": cid(RENO), "p": 0.5}, {"config": cid(IW4), "p": 0.5}]},
    {"id": "v6", "choices": [{"config": cid(RENO), "p": 0.3}, {"config": cid(H2ONLY), "p": 0.3},
                             {"config": cid(BBR32), "p": 0.4}]},
]
RULES = [
    {"prefix": "10.0.0.0/8", "group": "fast"},
    {"prefix": "10.1.2.0/24", "group": "slow"},
    {"prefix": "10.1.2.0/24", "sni": "news.example", "device": "android", "group": "slow-mobile-news"},
    {"prefix": "10.1.2.0/24", "device": "android", "group": "fast"},
    {"prefix": "10.1.2.0/24", "sni": "news.example", "group": "v6"},
    {"prefix": "10.1.2.128/25", "sni": "shop.example", "group": "fast"},
    {"prefix": "2001:db8::/32", "group": "v6"},
]


def draw_hex(hi: int, lo: int) -> str:
    return f"{(hi << 32) | lo:016x}"


def case(t: dict, why: str, addr: str, draw: str | None = None, sni=None, device=None) -> dict:
    dt = DecisionTable(t, validated=True)
    a = decide(dt, addr, sni, device, int(draw, 16) if draw else 0)
    out = {"addr": addr}
    if sni is not None:
        out["sni"] = sni
    if device is not None:
        out["device"] = device
    if draw is not None:
        out["draw"] = draw
    if t.get("salt"):
        out["cohort_draw"] = f"{cohort_draw(t['salt'], addr, t['version']):016x}"
    out.update({"group": a.group, "config": a.config, "p": a.p, "holdback": a.holdback,
                "layers": ["edge"] if (sni or device) else ["edge", "tcp"], "why": why})
    return out


def per_connection() -> dict:
    t = table("per-connection", 0.2, None, GROUPS, RULES)
    hb = holdback_threshold(0.2)
    cum75 = thresholds([0.75, 0.25])[0]
    free = 0xFFFFFFFF
    cases = [
        case(t, "only the /8 matches; lo < floor(0.75 * 2^32)", "10.9.9.9", draw_hex(free, 0x19999999)),
        case(t, "lo at the threshold: the second choice (the default, p = 0.8*0.25 + 0.2)", "10.9.9.9", draw_hex(free, cum75)),
        case(t, "lo one below the threshold: the first choice (p = 0.8*0.75)", "10.9.9.9", draw_hex(free, cum75 - 1)),
        case(t, "hi one below floor(0.2 * 2^32): held back to the default (p = 0.2 + 0.8*0.25)", "10.9.9.9", draw_hex(hb - 1, 0)),
        case(t, "hi at floor(0.2 * 2^32): not held back", "10.9.9.9", draw_hex(hb, 0)),
        case(t, "/24 beats /8; held back in a group without the default (p = 0.2)", "10.1.2.7", draw_hex(0, 0)),
        case(t, "/24 beats /8 (p = 0.8)", "10.1.2.7", draw_hex(free, free)),
        case(t, "same /24: the sni+device rule beats the sni, device and plain rules", "10.1.2.7", draw_hex(free, 0x33333333),
             sni="news.example", device="android"),
        case(t, "device differs: the sni-only rule", "10.1.2.7", draw_hex(free, 0x33333333), sni="news.example", device="ios"),
        case(t, "no sni: the device-only rule", "10.1.2.7", draw_hex(free, 0x33333333), device="android"),
        case(t, "/25 with sni beats the /24", "10.1.2.200", draw_hex(free, 0x80000000), sni="shop.example"),
        case(t, "/25 rule needs sni shop.example: falls back to the /24", "10.1.2.200", draw_hex(free, 0x80000000),
             sni="other.example"),
        case(t, "no rule: the default with p = 1", "192.0.2.1", draw_hex(free, 0x80000000)),
        case(t, "no rule and held back: still the default with p = 1, flagged", "192.0.2.1", draw_hex(0, 0x80000000)),
        case(t, "IPv6 rule, third choice", "2001:db8::1", draw_hex(free, 0xF0000000)),
        case(t, "IPv6 rule, second choice", "2001:db8::1", draw_hex(free, 0x80000000)),
        case(t, "IPv6 without a rule", "2001:db9::1", draw_hex(free, 0)),
        case(t, "an IPv4-mapped IPv6 address is its IPv4 client", "::ffff:10.9.9.9", draw_hex(free, 0)),
    ]
    return {"name": "per-connection", "table": t, "cases": cases}


def sticky() -> dict:
    salt = "000102030405060708090a0b0c0d0e0f"
    t = table("cohorts", 0.25, salt, GROUPS, RULES)
    dt = DecisionTable(t, validated=True)
    cases, seen = [], set()
    wanted = {  # address of the i-th client, why: the first client of each outcome becomes a case
        (lambda i: f"10.9.{i // 250}.{i % 250 + 1}"): "cohort draw of an IPv4 client, /8 group",
        (lambda i: f"10.1.2.{i % 250 + 1}"): "cohort draw of an IPv4 client, /24 group",
        (lambda i: f"192.0.2.{i % 250 + 1}"): "cohort draw of a client without a rule",
        (lambda i: f"2001:db8:0:{i:x}::1"): "cohort draw of an IPv6 client (its /64)",
    }
    for template, why in wanted.items():
        for i in range(1, 4000):
            addr = template(i)
            a = decide(dt, addr)
            key = (template, a.group, a.config, a.holdback)
            if key not in seen:
                seen.add(key)
                cases.append(case(t, f"{why}: {'held back' if a.holdback else 'treated'}", addr))
    cases += [
        case(t, "same /64 as 2001:db8:0:1::1: same cohort", "2001:db8:0:1:ffff:1:2:3"),
        case(t, "2001:db8:0:1::1 itself", "2001:db8:0:1::1"),
        case(t, "IPv4-mapped spelling: same cohort as 10.9.0.2", "::ffff:10.9.0.2"),
        case(t, "10.9.0.2 itself", "10.9.0.2"),
        case(t, "edge layer: device rule, cohort draw", "10.1.2.7", device="android"),
        case(t, "edge layer: sni+device rule, cohort draw", "10.1.2.9", sni="news.example", device="android"),
        case(t, "a per-connection draw is ignored under a salt", "10.9.0.2", draw=draw_hex(0, 0)),
    ]
    return {"name": "cohorts", "table": t, "cases": cases}


def main() -> None:
    key = bytes(range(16))
    sip = [{"key": key.hex(), "msg": bytes(range(n)).hex(), "out": f"{siphash24(key, bytes(range(n))):016x}"}
           for n in sorted(SIPHASH_REFERENCE)]
    for v, n in zip(sip, sorted(SIPHASH_REFERENCE)):
        assert int(v["out"], 16) == SIPHASH_REFERENCE[n], v  # the reference implementation's vectors
    salt = "000102030405060708090a0b0c0d0e0f"
    cohorts = [{"salt": salt, "addr": a, "version": v, "unit": cohort_unit(a).hex(),
                "draw": f"{cohort_draw(salt, a, v):016x}"}
               for a in ("10.9.9.9", "::ffff:10.9.9.9", "192.0.2.1", "2001:db8::1", "2001:db8::ffff", "2001:db8:0:1::1")
               for v in (7, 8)]
    for a, b in zip(cohorts[::2], cohorts[1::2]):  # a new version keeps the holdback half, re-draws the arm half
        assert a["draw"][:8] == b["draw"][:8] and a["draw"][8:] != b["draw"][8:]
    doc = {"doc": "Shared vectors of spec/decision.md (how a decision table is applied to a connection): SipHash-2-4 "
                  "reference outputs, cohort draws, and decisions for a table with per-connection draws and one with "
                  "per-client cohorts. 'draw' and 'cohort_draw' are 64-bit unsigned integers in hex (a cohort draw "
                  "depends on the salt, the address and the table's version); 'layers' says which "
                  "edges a case applies to (the TCP layer never knows sni or device). Written by "
                  "scripts/decision_vectors.py; checked by tests/test_decide.py, edge/internal/rules and the sock_ops test.",
           "siphash": sip, "cohorts": cohorts, "tables": [per_connection(), sticky()]}
    for t in doc["tables"]:
        for c in t["cases"]:
            assert math.isfinite(c["p"]) and 0 < c["p"] <= 1
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{OUT}: {sum(len(t['cases']) for t in doc['tables'])} decisions, {len(sip)} siphash, {len(cohorts)} cohorts")


if __name__ == "__main__":
    main()
