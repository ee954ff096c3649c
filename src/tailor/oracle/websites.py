"""Synthetic workloads: pages drawn from the Web Almanac and single objects.

Every figure cites a row of the project's published-figures sheet (docs/references/FACTS.md, section 3), each with its original source. Pages are drawn with a fixed seed
per page, so the catalog is identical on every machine and run; names are stable.

>>> cat = default_catalog()
>>> cat["object-100KB"].total_bytes, cat["object-100KB"].kind
(102400, 'object')
>>> sorted(cat)[:3]
['object-100KB', 'object-10KB', 'object-1MB']
>>> 1 < cat["page-medium-2"].n_origins < len(cat["page-medium-2"].objects)
True
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from scipy.stats import norm

from tailor.errors import OracleError
from tailor.oracle.base import WebObject, Website
from tailor.scenario import facts
from tailor.scenario.families import SEARCH_RESPONSE_PREFIX

KB = 1024
_Z90 = 1.2816  # standard-normal 90th percentile: sigma = ln(p90 / median) / z90

# Lognormal per-object sizes per type: (median bytes, p90 bytes).
# FACTS.md 3.1 "Per-object (response) sizes": 2022 medians image 8 KB (mobile), JS 4 KB, CSS 2 KB, font 20 KB.
# The p90s are chosen so that the lognormal mean times the 2024 median request count per type reproduces
# the 2024 median bytes per type (FACTS.md 3.1 "bytes per page by type"): images 900 KB / 16 requests ->
# mean 56 KB -> p90 ~100 KB (between the AVIF 45 KB and JPG 274 KB format p90s); JS 570 KB / 22 -> p90
# ~47 KB; CSS 75 KB / 8 -> p90 ~19 KB; fonts ~131 KB / 4 (desktop homepage) -> p90 ~72 KB.
# HTML: median homepage HTML 18 KB (desktop, FACTS.md 3.1). "other" (JSON, beacons): assumption, 2 KB median.
SIZE_MEDIAN_P90 = {
    "html": (18 * KB, 60 * KB),
    "css": (2 * KB, 19 * KB),
    "js": (4 * KB, 47 * KB),
    "img": (8 * KB, 100 * KB),
    "font": (20 * KB, 72 * KB),
    "other": (2 * KB, 12 * KB),
}

# Share of requests per type: 2024 mobile medians HTML 2, fonts 3, CSS 8, images 16, JS 22 of 66 requests
# (FACTS.md 3.1 "2024 median requests by type"); the remaining 15 are "other".
TYPE_SHARE = {"html": 2 / 66, "font": 3 / 66, "css": 8 / 66, "img": 16 / 66, "js": 22 / 66, "other": 15 / 66}

# Discovery level per type: HTML at 0 (a second HTML, e.g. an iframe, at 1); CSS/JS referenced by the HTML
# at 1, a share of JS inserted by scripts at 2; images at 1 (img tags) or 2 (CSS backgrounds, JS-inserted);
# fonts at 2 (referenced by CSS); "other" (XHR/beacons fired by scripts) at 2.
LEVEL2_SHARE = {"html": 0.0, "css": 0.1, "js": 0.3, "img": 0.4, "font": 1.0, "other": 1.0}

# Page classes: request counts at Web Almanac 2024 quantiles (FACTS.md 3.1 requests per page:
# mobile p10 22, p25 39, p50 66, p75 109, p90 170; desktop 24/42/71/115/176).
PAGE_REQUESTS = {
    "page-light-1": 22, "page-light-2": 28, "page-light-3": 34, "page-light-4": 40,
    "page-medium-1": 50, "page-medium-2": 66, "page-medium-3": 71, "page-medium-4": 90,
    "page-heavy-1": 109, "page-heavy-2": 130, "page-heavy-3": 150, "page-heavy-4": 176,
}

# Config-Snob's object sizes (50 KB .. 2 MB, seed 002 section 5) plus 10 KB; KB = 1024 bytes.
OBJECT_SIZES = {"object-10KB": 10 * KB, "object-50KB": 50 * KB, "object-100KB": 100 * KB,
                "object-500KB": 500 * KB, "object-1MB": 1024 * KB, "object-2MB": 2048 * KB}

REQUESTS_PER_CONNECTION = 5.6  # FACTS.md 3.2: requests per connection 5.6 (2020), median 13 connections
FIRST_PARTY_SHARE = 0.5  # assumption; IMC'11 (FACTS.md 3.2): non-origin sources carry over 35% of bytes


def default_catalog() -> dict[str, Website]:
    """The 12 Almanac-drawn pages and the 6 single objects, by stable name."""
    catalog = {name: single_object(name, size) for name, size in OBJECT_SIZES.items()}
    for i, (name, n_requests) in enumerate(PAGE_REQUESTS.items()):
        catalog[name] = synthesize_page(name, n_requests, seed=1000 + i)
    return catalog


# Search responses (SmartIW's mobile search, seed 004): Table I gives only the mean, about 120 KB, and Fig. 8a shows
# "flow sizes almost all small". ASSUMPTION [M]: lognormal with sigma 0.9 (p90 / median ~ 3.2), discretised at its
# ten deciles' midpoints and scaled so that the ten equally likely responses average exactly 120 KB.
SEARCH_SIZE_SIGMA = 0.9
SEARCH_RESPONSES = 10


def search_catalog() -> dict[str, Website]:
    """Ten equally likely search responses, by stable name ``search-<KB>KB``, timed as TCP response times.

    >>> cat = search_catalog()
    >>> round(np.mean([w.total_bytes for w in cat.values()]) / 1024), min(cat, key=lambda n: cat[n].total_bytes)
    (120, 'search-19KB')
    >>> cat["search-375KB"].metric
    'response'
    """
    z = norm.ppf((np.arange(SEARCH_RESPONSES) + 0.5) / SEARCH_RESPONSES)
    sizes = np.exp(SEARCH_SIZE_SIGMA * z)
    sizes = np.round(sizes * facts.SEARCH_MEAN_RESPONSE_BYTES / sizes.mean()).astype(int)
    out = {}
    for size in sizes:
        name = f"{SEARCH_RESPONSE_PREFIX}{round(size / KB)}KB"
        out[name] = Website(name, (WebObject(int(size), origin=0, level=0, kind="other"),), metric="response")
    return out


def is_search_response(name: str) -> bool:
    return name.startswith(SEARCH_RESPONSE_PREFIX)


def single_object(name: str, size_bytes: int) -> Website:
    """One response from one origin: the Config-Snob completion-time workload."""
    if size_bytes <= 0:
        raise OracleError(f"The 'size_bytes' parameter of single_object must be > 0. Got {size_bytes!r}.")
    return Website(name, (WebObject(int(size_bytes), origin=0, level=0, kind="other"),))


def synthesize_page(name: str, n_requests: int, seed: int, n_origins: int | None = None) -> Website:
    """Draw a page with ``n_requests`` objects: types, lognormal sizes, levels and origins (fixed seed)."""
    if n_requests < 2:
        raise OracleError(f"The 'n_requests' parameter of synthesize_page must be >= 2. Got {n_requests!r}.")
    rng = np.random.default_rng(seed)
    kinds = _draw_kinds(n_requests, rng)
    sizes = [_draw_size(k, rng) for k in kinds]
    levels = [0] + [_draw_level(k, rng) for k in kinds[1:]]
    if n_origins is None:  # median 13 connections at ~70 requests (FACTS.md 3.2), jittered per page
        n_origins = int(np.clip(round(n_requests / REQUESTS_PER_CONNECTION * rng.uniform(0.7, 1.3)), 2, n_requests))
    origins = _draw_origins(kinds, n_origins, rng)
    return make_page(name, zip(sizes, origins, levels, kinds))


def make_page(name: str, objects: Iterable[tuple[int, int, int, str]]) -> Website:
    """Build a page from explicit (size_bytes, origin, level, kind) rows; validates the structure.

    Used by the testbed to describe a page it really serves (see ``chromium_test_page``).
    """
    objs = tuple(WebObject(int(s), int(o), int(lv), str(k)) for s, o, lv, k in objects)
    if not objs or objs[0].level != 0 or objs[0].origin != 0:
        raise OracleError(f"page {name!r}: the first object must be the HTML at level 0 on origin 0")
    if any(o.size_bytes <= 0 or o.level < 0 or o.origin < 0 for o in objs):
        raise OracleError(f"page {name!r}: sizes must be > 0, levels and origins >= 0")
    if sorted({o.level for o in objs}) != list(range(max(o.level for o in objs) + 1)):
        raise OracleError(f"page {name!r}: discovery levels must be contiguous from 0")
    return Website(name, objs)


def chromium_test_page() -> Website:
    """The page measured with real Chromium on this machine (docs/references/link-feasibility.md section 4).

    index.html 21 KB; 3 CSS, 6 JS, 18 PNGs 2..150 KB at level 1; bg.png (from style0.css), late0.png and
    lazy.js (from app0.js) at level 2; 1.29 MB in total, one origin. The note gives only the totals and
    the PNG range, so CSS/JS sizes are assumptions and PNG sizes are geometric between 2 and 150 KB,
    scaled so the 30 objects sum to 1.29 MB.
    """
    pngs = np.geomspace(2 * KB, 150 * KB, 18)
    fixed = [8 * KB] * 3 + [20 * KB] * 6 + [60 * KB, 40 * KB, 6 * KB]  # css, js, bg, late0, lazy.js
    scale = (1.29e6 - sum(fixed)) / pngs.sum()
    rows = [(21 * KB, 0, 0, "html")]
    rows += [(8 * KB, 0, 1, "css")] * 3 + [(20 * KB, 0, 1, "js")] * 6
    rows += [(int(s * scale), 0, 1, "img") for s in pngs]
    rows += [(60 * KB, 0, 2, "img"), (40 * KB, 0, 2, "img"), (6 * KB, 0, 2, "js")]
    return make_page("chromium-test-page", rows)


def _draw_kinds(n: int, rng: np.random.Generator) -> list[str]:
    """First object is the HTML; the rest follow the Almanac median type mix (multinomial)."""
    names = list(TYPE_SHARE)
    share = np.array([TYPE_SHARE[k] for k in names])
    counts = rng.multinomial(n - 1, share / share.sum())
    kinds = [k for k, c in zip(names, counts) for _ in range(c)]
    rng.shuffle(kinds)
    return ["html"] + kinds


def _draw_size(kind: str, rng: np.random.Generator) -> int:
    median, p90 = SIZE_MEDIAN_P90[kind]
    sigma = np.log(p90 / median) / _Z90
    return int(max(200, min(median * np.exp(sigma * rng.standard_normal()), 4 * 1024 * KB)))


def _draw_level(kind: str, rng: np.random.Generator) -> int:
    return 2 if rng.random() < LEVEL2_SHARE[kind] else 1


def _draw_origins(kinds: list[str], n_origins: int, rng: np.random.Generator) -> list[int]:
    """Origin 0 serves the HTML and about half the rest; fonts share one font origin; third parties Zipf."""
    third = np.arange(1, n_origins)
    zipf = 1.0 / third
    out = []
    for k in kinds:
        if len(out) == 0 or n_origins == 1 or (k in ("html", "css") and rng.random() < 0.8):
            out.append(0)
        elif k == "font":
            out.append(1)
        elif rng.random() < FIRST_PARTY_SHARE:
            out.append(0)
        else:
            out.append(int(rng.choice(third, p=zipf / zipf.sum())))
    return _compact(out)


def _compact(origins: list[int]) -> list[int]:
    """Renumber origins 0..m-1 in order of first use (origin 0 stays the HTML's)."""
    order: dict[int, int] = {}
    for o in origins:
        order.setdefault(o, len(order))
    return [order[o] for o in origins]
