"""The dashboard (``GET /``): one server-rendered HTML page with inline SVG plots, no external assets.

Shows the published table (version, origin, holdback), under an operator's override what the rollback
test found slower than holdback in it, every group's greedy configuration and its
probability with the evidence against the holdback, the ISPs (ASNs) and regions of the group's clients
(:func:`group_places`), improvement vs holdback over time (overall and
for the busiest groups), and the recent table versions with the audit reasons. Refreshes every 10 s.
"""

from __future__ import annotations

import math
import time
from html import escape

from tailor.manager.guardrails import greedy

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
TOP_GROUPS = 8
MAX_ROWS = 60
PLACES_WINDOW = 100_000  # the group -> ASN/region columns read this many of the most recent records
PLACES_SQL = """
SELECT "group", client_prefix, asn, region, count(*) FROM telemetry
WHERE "group" IS NOT NULL AND seq > (SELECT coalesce(max(seq), 0) FROM telemetry) - ?
GROUP BY ALL ORDER BY count(*) DESC LIMIT 20000
"""
CSS = """body{font:14px system-ui,sans-serif;margin:20px;color:#222;background:#fff}h1{font-size:20px}
h2{font-size:16px;margin-top:24px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:left}th{background:#eef}.num{text-align:right;font-variant-numeric:tabular-nums}.kv span{margin-right:18px}
.bad{color:#b00}.good{color:#070}svg{background:#fafafa;border:1px solid #ddd}"""


def pct(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


def line_chart(series: dict[str, list[tuple[float, float]]], title: str, width=600, height=240) -> str:
    """Inline SVG line chart of y (fractions, shown as %) over time; one polyline per series."""
    pts = [p for s in series.values() for p in s if p[1] is not None]
    head = f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" aria-label="{escape(title)}">'
    head += f'<text x="10" y="16" font-size="13">{escape(title)}</text>'
    if not pts:
        return head + f'<text x="{width // 2 - 60}" y="{height // 2}" fill="#888">no data yet</text></svg>'
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(0.0, *(p[1] for p in pts)), max(0.0, *(p[1] for p in pts))
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 0.01)
    left, right, top, bottom = 56, width - 170, 26, height - 28

    def sx(x):
        return left + (x - x0) / (x1 - x0) * (right - left)

    def sy(y):
        return bottom - (y - y0) / (y1 - y0) * (bottom - top)

    body = [f'<line x1="{left}" y1="{sy(0):.1f}" x2="{right}" y2="{sy(0):.1f}" stroke="#999" stroke-dasharray="4 3"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#444"/>']
    for y in (y0, (y0 + y1) / 2, y1):
        body.append(f'<text x="{left - 4}" y="{sy(y) + 4:.1f}" font-size="11" text-anchor="end">{pct(y)}</text>')
    span = x1 - x0
    body.append(f'<text x="{left}" y="{height - 8}" font-size="11">{time.strftime("%H:%M:%S", time.gmtime(x0))}</text>')
    body.append(f'<text x="{right}" y="{height - 8}" font-size="11" text-anchor="end">+{span:.0f} s</text>')
    for i, (name, s) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s if y is not None)
        body.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coords}"/>')
        for x, y in s[-1:]:
            if y is not None:
                body.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        body.append(f'<text x="{right + 8}" y="{top + 10 + 14 * i}" font-size="11" fill="{color}">'
                    f'{escape(name[:26])}</text>')
    return head + "".join(body) + "</svg>"


def group_places(mgr) -> dict[str, dict[str, dict]]:
    """Group -> {"asn": {label: records}, "region": {region: records}} over the most recent records: each
    record's own asn/region, else the manager's databases' (as the feed resolves them), else "?" (unknown)."""
    out: dict[str, dict[str, dict]] = {}
    for group, prefix, asn, region, n in mgr.store.query(PLACES_SQL, [PLACES_WINDOW]):
        place = mgr.enricher.lookup(prefix)  # cached per /24; UNKNOWN without databases
        asn, region = asn or place.asn, region or place.region
        org = place.org if place.asn == asn else ""
        label = (f"AS{asn} {org[:40]}".rstrip() if asn else "?")
        counts = out.setdefault(group, {"asn": {}, "region": {}})
        counts["asn"][label] = counts["asn"].get(label, 0) + n
        counts["region"][region or "?"] = counts["region"].get(region or "?", 0) + n
    return out


def _shares(counts: dict[str, int], top: int = 3) -> str:
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v / total:.0%}" for k, v in ranked[:top])
    return text + (f", +{len(ranked) - top} more" if len(ranked) > top else "")


def _group_table(mgr) -> str:
    doc, guard, space = mgr.current.doc, mgr.guard, mgr.space
    labels = {c.id: space.label(i) for i, c in enumerate(space.configs)}
    places = group_places(mgr)
    rows = []
    for g in doc["groups"]:
        best = greedy(g["choices"])
        p = next(c["p"] for c in g["choices"] if c["config"] == best)
        treated, hold = guard.pooled(g["id"]), guard.holdback.get(g["id"])
        rows.append((treated.n, g["id"], best, p, len(g["choices"]), hold.n if hold else 0, guard.improvement(g["id"]),
                     ", ".join(sorted(guard.blocked.get(g["id"], {})))))
    rows.sort(key=lambda r: (-r[0], r[1]))
    out = ["<table><tr><th>group</th><th>clients' ASN</th><th>clients' region</th><th>configuration (greedy)</th>"
           "<th>p</th><th>choices</th><th>treated n</th>"
           "<th>holdback n</th><th>improvement vs holdback</th><th>rolled back</th></tr>"]
    for n, gid, best, p, k, hn, imp, blocked in rows[:MAX_ROWS]:
        cls = "good" if imp == imp and imp > 0 else "bad" if imp == imp and imp < 0 else ""
        where = places.get(gid, {"asn": {}, "region": {}})
        out.append(f"<tr><td>{escape(gid)}</td><td>{escape(_shares(where['asn']))}</td>"
                   f"<td>{escape(_shares(where['region']))}</td><td>{escape(labels.get(best, best))} <small>{best}</small></td>"
                   f'<td class="num">{p:.3f}</td><td class="num">{k}</td><td class="num">{n}</td><td class="num">{hn}</td>'
                   f'<td class="num {cls}">{pct(imp)}</td><td class="bad">{escape(blocked)}</td></tr>')
    more = f"<p>{len(rows) - MAX_ROWS} more groups not shown.</p>" if len(rows) > MAX_ROWS else ""
    return "".join(out) + "</table>" + more


def _charts(mgr) -> str:
    cycles = mgr.store.query("SELECT ts, improvement, window_improvement FROM cycles ORDER BY ts DESC LIMIT 500")[::-1]
    overall = line_chart({"cumulative": [(a, i) for a, i, _ in cycles], "last cycle": [(a, w) for a, _, w in cycles]},
                         "Improvement vs holdback, all groups")
    top = [g for g, in mgr.store.query(
        "SELECT grp FROM group_history WHERE ts = (SELECT max(ts) FROM group_history) AND improvement IS NOT NULL "
        "ORDER BY n_treated DESC LIMIT ?", [TOP_GROUPS])]
    series = {g: [] for g in top}
    if top:
        marks = ",".join("?" * len(top))
        for at, g, imp in mgr.store.query(f"SELECT ts, grp, improvement FROM group_history WHERE grp IN ({marks}) "
                                          "ORDER BY ts", top):
            series[g].append((at, imp))
    per_group = line_chart(series, f"Improvement vs holdback, {len(top)} busiest groups")
    return f"<div>{overall} {per_group}</div>"


def _versions(mgr) -> str:
    out = ["<table><tr><th>time (UTC)</th><th>version</th><th>actor</th><th>action</th><th>reason</th></tr>"]
    for at, version, actor, action, reason in mgr.store.recent_audit(15):
        out.append(f"<tr><td>{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(at))}</td><td class=\"num\">{version}</td>"
                   f"<td>{escape(actor)}</td><td>{escape(action)}</td><td>{escape(reason[:300])}</td></tr>")
    return "".join(out) + "</table>"


def _summary(mgr) -> str:
    cur, m = mgr.current, mgr.metrics
    value = lambda c: int(c._value.get())  # noqa: E731 (prometheus counters expose no public getter)
    override = "active" if mgr.override_active(mgr.clock()) else "none"
    items = {"policy": mgr.cfg.policy, "space": f"{mgr.space.name} ({len(mgr.space)} configs, {mgr.space.allowed})",
             "table version": cur.version, "origin": cur.origin, "override": override,
             "holdback": f"{cur.doc.get('holdback', 0):.2f}", "groups": len(cur.doc["groups"]),
             "rules": len(cur.doc["rules"]), "records accepted": value(m.records), "rejected": value(m.rejected),
             "dropped": value(m.dropped), "stored": mgr.store.telemetry_count(), "prefixes": len(mgr.archive),
             "geoip": _geoip(mgr)}
    out = '<p class="kv">' + "".join(f"<span><b>{escape(k)}</b>: {escape(str(v))}</span>" for k, v in items.items()) + "</p>"
    return out + _override_findings(mgr)


def _override_findings(mgr) -> str:
    """What the rollback test found in the operator's pinned table (the manager's ``override_findings``)."""
    if not mgr.override_active(mgr.clock()) or not mgr.override_findings:
        return ""
    rows = []
    for f in mgr.override_findings[:MAX_ROWS]:
        what = "served unchanged (alert)" if f["action"] == "alert" else "mass moved to the default (apply)"
        rows.append(f"<li>{escape(f['config'])} in {escape(f['group'])}: {100 * f['slower']:+.1f}% vs holdback "
                    f"(n={f['n']} vs {f['n_holdback']}, version {f['version']}); {what}</li>")
    return (f'<p class="bad"><b>Override regressions</b>: the operator\'s table serves configurations significantly '
            f"slower than holdback</p><ul>{''.join(rows)}</ul>")


def _geoip(mgr) -> str:
    """Which databases enrich clients, and how their lookups went (invalid values are counted, not used)."""
    loaded = mgr.enricher.describe()
    if not loaded:
        return "none (ASN and region only from the records)"
    c = mgr.enricher.counts
    dbs = ", ".join(f"{k} {v['type']}" for k, v in loaded.items())
    invalid = c["asn_invalid"] + c["region_invalid"] + c["subdivision_invalid"] + c["bad_address"]
    return f"{dbs}; {c['lookups']} lookups, {c['cache_hits']} cached, {invalid} invalid values"


def render_dashboard(mgr) -> str:
    return (f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">'
            f"<title>Tailor manager</title><style>{CSS}</style></head><body><h1>Tailor manager</h1>"
            f"{_summary(mgr)}<h2>Improvement over time</h2>{_charts(mgr)}<h2>Groups</h2>{_group_table(mgr)}"
            f"<h2>Recent table versions and audit log</h2>{_versions(mgr)}</body></html>")
