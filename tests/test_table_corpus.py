"""Property test across languages: every table the manager publishes, and every generated table Python
accepts, is accepted by Go's parser (``rules.Parse``, what tailor-edge and tailor-agent run); every
mutation Python refuses, Go refuses too.

Tables come from (a) managers with several registered policies fed by a synthetic edge over IPv4 and
IPv6 prefixes and many SNIs and devices, and (b) a seeded generator of random tables (canonical v4/v6
prefixes of every length, bounded strings at their limits, probabilities that sum to 1 within the
tolerance) plus one-field mutations (NaN, 1e308, long or control-character strings, odd prefix
spellings). For every accepted table, 40 connections (clients inside its rules' prefixes, strangers,
v4-mapped spellings, its SNIs and devices, random 64-bit draws; half the random tables carry a cohort
salt) are decided by ``tailor.table.decide``, and Go's ``rules.Decide`` must agree on group, configuration,
holdback and probability. The corpus is written to a temporary directory and read by the Go test
``TestTableCorpus`` (edge/internal/rules), which skips unless ``TAILOR_TABLE_CORPUS`` names it.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tailor.errors import TableError
from tailor.manager.config import ManagerConfig
from tailor.manager.service import Manager
from tailor.manager.synth import SyntheticEdge
from tailor.space import ConfigSpace
from tailor.table import DecisionTable, decide, parse_table

EDGE = Path(__file__).resolve().parents[1] / "edge"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("go") is None, reason="needs Go for the edge's table parser")]
SPACE = ConfigSpace.named("core")


def _manager_tables(tmp: Path) -> list[dict]:
    out = []
    v4 = [f"10.{i}.{j}.0/24" for i in range(3) for j in range(8)]
    sites = ["shop.example", "news.example", "a-" + "b" * 200 + ".example"]
    rng = np.random.default_rng(3)
    factors = {c.id: float(rng.uniform(0.6, 1.4)) for c in SPACE.configs}
    factors[SPACE.configs[SPACE.default_index].id] = 1.0
    for k, policy in enumerate(("configanator", "mab-nc", "config-snob", "bo-nc")):
        cfg = ManagerConfig(data_dir=str(tmp / f"m{k}"), token="t", update_freq_s=0, policy=policy,
                            site_min_records=20)
        mgr = Manager(cfg)
        edge = SyntheticEdge(v4, sites=sites, factor=lambda p, cid: factors[cid], seed=k)
        try:
            for c in range(5):
                edge.apply(mgr.current.doc)
                body = json.dumps(edge.batch(1500, 1_795_000_000.0 + 100 * c)).encode()
                assert mgr.ingest(body).status == 202
                mgr.run_cycle(now=1_795_000_000.0 + 100 * c + 50)
                out.append(copy.deepcopy(mgr.current.doc))
        finally:
            mgr.close()
    return out


def _random_prefix(rng: random.Random) -> str:
    if rng.random() < 0.5:
        bits = rng.randint(0, 32)
        return str(ipaddress.ip_network((rng.getrandbits(32), bits), strict=False))
    bits = rng.randint(0, 128)
    return str(ipaddress.ip_network((rng.getrandbits(128), bits), strict=False))


def _random_table(rng: random.Random) -> dict:
    configs = rng.sample(SPACE.configs, rng.randint(1, 12))
    default = SPACE.configs[SPACE.default_index]
    ids = {c.id: dict(c.changes()) for c in configs + [default]}
    printable = "".join(chr(c) for c in range(0x21, 0x7F))
    groups = []
    for g in range(rng.randint(1, 8)):
        chosen = rng.sample(sorted(ids), rng.randint(1, len(ids)))
        w = [rng.random() + 1e-3 for _ in chosen]
        ps = [x / sum(w) for x in w]
        gid = f"g{g}|" + "".join(rng.choices(printable + " ", k=rng.randint(0, 190)))
        groups.append({"id": gid, "choices": [{"config": c, "p": p} for c, p in zip(chosen, ps)]})
    rules, seen = [], set()
    for _ in range(rng.randint(0, 60)):
        r = {"prefix": _random_prefix(rng), "group": rng.choice(groups)["id"]}
        if rng.random() < 0.4:
            r["sni"] = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789.-_", k=rng.randint(1, 253)))
        if rng.random() < 0.3:
            r["device"] = "".join(rng.choices(printable, k=rng.randint(1, 64)))
        key = (r["prefix"], r.get("sni"), r.get("device"))
        if key not in seen:
            seen.add(key)
            rules.append(r)
    table = {"schema": "tailor.decision-table/v1", "version": rng.randint(1, 2**53 - 1),
             "generated_at": rng.uniform(0, 1e10), "valid_for_s": rng.uniform(1, 31536000), "policy": "corpus",
             "holdback": rng.choice([0.0, 0.2, rng.random() * 0.99]), "default": default.id, "configs": ids,
             "groups": groups, "rules": rules}
    if rng.random() < 0.5:
        table["salt"] = f"{rng.getrandbits(128):032x}"
    return table


def _decisions(t: dict, rng: random.Random, n: int = 40) -> list[dict]:
    """Connections to decide in ``t`` (clients inside its rules' prefixes, strangers, v4-mapped spellings,
    the rules' SNIs and devices) with what tailor.table.decide gives them: Go's rules.Decide must agree."""
    table = DecisionTable(t, validated=True)
    out = []
    for _ in range(n):
        rule = rng.choice(t["rules"]) if t["rules"] and rng.random() < 0.8 else None
        if rule is not None:
            net = ipaddress.ip_network(rule["prefix"])
            addr = net.network_address + rng.getrandbits(net.max_prefixlen - net.prefixlen) if net.prefixlen < net.max_prefixlen else net.network_address
        else:
            addr = ipaddress.ip_address(rng.getrandbits(32)) if rng.random() < 0.5 else ipaddress.ip_address(rng.getrandbits(128))
        text = f"::ffff:{addr}" if addr.version == 4 and rng.random() < 0.1 else str(addr)
        sni = rule.get("sni") if rule is not None and rng.random() < 0.7 else None
        device = rule.get("device") if rule is not None and rng.random() < 0.7 else None
        draw = rng.getrandbits(64)
        a = decide(table, text, sni, device, draw)
        out.append({"addr": text, "sni": sni or "", "device": device or "", "draw": f"{draw:016x}",
                    "group": a.group or "", "config": a.config, "p": a.p, "holdback": a.holdback})
    return out


MUTATIONS = [
    lambda t: re.sub(r'"p": [0-9.e-]+', '"p": NaN', json.dumps(t), count=1),
    lambda t: json.dumps(dict(t, generated_at=1e308)),
    lambda t: json.dumps(dict(t, policy="p" * 101)),
    lambda t: json.dumps(dict(t, rules=[{"prefix": "10.0.0.0/255.0.0.0", "group": t["groups"][0]["id"]}])),
    lambda t: json.dumps(dict(t, rules=[{"prefix": "10.0.0.0/8", "sni": "x\n", "group": t["groups"][0]["id"]}])),
    lambda t: json.dumps(dict(t, rules=[{"prefix": "10.0.0.0/8", "sni": "a" * 254, "group": t["groups"][0]["id"]}])),
    lambda t: json.dumps(dict(t, rules=[{"prefix": "10.0.0.0/8", "device": "", "group": t["groups"][0]["id"]}])),
    lambda t: json.dumps(dict(t, salt="ABCDEF" * 5 + "00")),
    lambda t: json.dumps(dict(t, default=t["default"] + "\n")),
    lambda t: json.dumps(t).replace(f'"version": {t["version"]}', '"version": 99999999999999999999', 1),
]


def test_go_parser_accepts_what_python_accepts(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    tables = _manager_tables(tmp_path)
    assert len(tables) == 20 and any(len(t["rules"]) > 50 for t in tables)
    rng = random.Random(11)
    n_acc = n_rej = 0
    decisions = {}
    for i, t in enumerate(tables):
        (corpus / f"accept-manager-{i:03d}.json").write_text(json.dumps(t))
        decisions[f"accept-manager-{i:03d}.json"] = _decisions(t, rng)
        n_acc += 1
    for i in range(200):
        t = _random_table(rng)
        text = json.dumps(t)
        parse_table(text)  # Python accepts it
        (corpus / f"accept-random-{i:03d}.json").write_text(text)
        decisions[f"accept-random-{i:03d}.json"] = _decisions(t, rng)
        n_acc += 1
        mutated = MUTATIONS[i % len(MUTATIONS)](t)
        with pytest.raises(TableError):
            parse_table(mutated)
        (corpus / f"reject-random-{i:03d}.json").write_text(mutated)
        n_rej += 1
    (corpus / "decisions.jsonl").write_text("".join(json.dumps({"table": k, "cases": v}) + "\n" for k, v in decisions.items()))
    n_dec = sum(map(len, decisions.values()))
    res = subprocess.run(["go", "test", "-count=1", "-run", "TestTableCorpus", "-v", "./internal/rules/"], cwd=EDGE,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TAILOR_TABLE_CORPUS": str(corpus)})
    assert res.returncode == 0 and "--- PASS: TestTableCorpus" in res.stdout, res.stdout[-4000:] + res.stderr[-2000:]
    assert f"accepted {n_acc}, rejected {n_rej}, decisions {n_dec} agree" in res.stdout, res.stdout[-2000:]
