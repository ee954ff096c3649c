"""Synthetic web pages for headless Chromium: real files, several origins (one IP each), TLS, HTTP/1.1 and HTTP/2.

The pages are the catalog pages of ``tailor.oracle.websites`` (drawn with fixed seeds from the Web Almanac figures
of FACTS.md section 3.1: request counts, type mix, lognormal per-type sizes, discovery levels and origins), turned
into files a browser really loads, so that a measured page-load time and the model's page of the same name
describe the same workload:

* object 0 is ``index.html`` on origin 0. Level-1 objects are referenced from the HTML (``<link rel=stylesheet>``,
  ``<script src>`` at the end of the body, ``<img>``, ``<iframe>`` for a second HTML). Level-2 objects are
  discovered only once a level-1 object has loaded: fonts through ``@font-face`` in a level-1 stylesheet (and an
  element that uses the font), a share of images as CSS backgrounds, everything else inserted by a level-1 script
  (``<script>``, ``<img>``, ``<link>``, ``<iframe>`` elements, which delay the load event). A level-2 object
  without a possible parent is promoted to level 1; the manifest keeps the levels actually served.
* Every file has its type's real syntax plus seeded random padding to the catalog size (PNG: a valid 1x1 image
  with a private ancillary chunk; CSS/JS: a trailing comment; fonts: random bytes, which the browser downloads
  in full and then rejects). gzip is off, so the bytes on the wire are the catalog bytes (+ headers, TLS).
* Origin k is ``o<k>.tailor.test`` at its own address in the server namespace (origin 0 = tailor-link's server
  address, others 10.231.1.k on ``lo``), so Chromium opens separate connections per origin (HTTP/2 connection
  coalescing needs a shared IP) and maps names with ``--host-resolver-rules``.
* nginx listens on 443 with ALPN h2 + http/1.1 and on 8444 with http/1.1 only: the page URL's port picks the
  HTTP version, so one browser serves both versions in a job (``page_url``).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import numpy as np

from tailor.oracle.base import Website
from tailor.oracle.timeline import parents
from tailor.oracle.websites import default_catalog, make_page
from tailor.testbed.server import NGINX_HEAD, SERVER_IP, TestbedError, _make_cert, require_tools

# Five catalog pages spanning the Almanac's request-count quantiles (22..130 requests, 0.3..2.9 MB, 3..21 origins).
MEASURED_PAGES = ("page-light-1", "page-light-3", "page-medium-2", "page-medium-3", "page-heavy-2")
DOMAIN = "tailor.test"
H2_PORT, H1_PORT = 443, 8444
EXT = {"html": "html", "css": "css", "js": "js", "img": "png", "font": "woff2", "other": "js"}

NGINX_PAGES_CONF = NGINX_HEAD + """\
  keepalive_timeout 30s;
  types {{ text/html html; text/css css; application/javascript js; image/png png; font/woff2 woff2; }}
  ssl_certificate {d}/cert.pem;
  ssl_certificate_key {d}/key.pem;
  ssl_protocols TLSv1.3;
  add_header Cache-Control no-store;
  add_header Access-Control-Allow-Origin *;
  add_header Timing-Allow-Origin *;
{servers}
}}
"""
SERVER_BLOCK = """  server {{ listen {ip}:{h2} ssl http2; listen {ip}:{h1} ssl; server_name {host};
           root {d}/www/o{k}; }}
"""


def origin_ip(k: int) -> str:
    """Origin 0 is tailor-link's server address; others live on the server namespace's lo as 10.231.1.k."""
    if not 0 <= k <= 250:
        raise TestbedError(f"origin index {k} out of range [0, 250]")
    return SERVER_IP if k == 0 else f"10.231.1.{k}"


def host(k: int) -> str:
    return f"o{k}.{DOMAIN}"


def page_dir(page: str, http: str) -> str:
    """Each page is written twice, once per HTTP version, with every URL on that version's port."""
    return page if http == "2" else f"{page}-h1"


def page_url(page: str, http: str) -> str:
    return f"https://{host(0)}:{H2_PORT if http == '2' else H1_PORT}/{page_dir(page, http)}/index.html"


def file_name(i: int, kind: str) -> str:
    return "index.html" if i == 0 else f"{kind}{i}.{EXT[kind]}"


def catalog_pages(names=MEASURED_PAGES) -> dict[str, Website]:
    cat = default_catalog()
    missing = [n for n in names if n not in cat or cat[n].kind != "page"]
    if missing:
        known = sorted(n for n in cat if n.startswith("page"))
        raise TestbedError(f"The 'pages' of a plan must be catalog pages {known}. Got unknown {missing}.")
    return {n: cat[n] for n in names}


def build_page(site: Website, seed: int, http: str = "2") -> tuple[dict[str, bytes], list[dict]]:
    """Files {"o<k>/<dir>/<file>": bytes} and the manifest rows (size, origin, level, kind, path) of one page."""
    rng = np.random.default_rng(seed)
    port, pdir = (H2_PORT if http == "2" else H1_PORT), page_dir(site.name, http)
    objs = list(site.objects)
    levels = [o.level for o in objs]
    l1 = {kind: [i for i, o in enumerate(objs) if o.level == 1 and o.kind == kind] for kind in EXT}
    url = {i: f"https://{host(o.origin)}:{port}/{pdir}/{file_name(i, o.kind)}" for i, o in enumerate(objs)}
    css_rules: dict[int, list[str]] = {i: [] for i in l1["css"]}
    js_inserts: dict[int, list[str]] = {i: [] for i in l1["js"]}
    html_extra: list[str] = []
    for i, (o, (by, parent)) in enumerate(zip(objs, parents(site))):
        if o.level != 2:
            continue
        if by == "css" and o.kind == "font":
            css_rules[parent].append(f"@font-face{{font-family:F{i};src:url({url[i]})}}.f{i}{{font-family:F{i}}}")
            html_extra.append(f'<p class="f{i}">font {i}</p>')
        elif by == "css":
            css_rules[parent].append(f".b{i}{{background:url({url[i]});width:1px;height:1px}}")
            html_extra.append(f'<div class="b{i}"></div>')
        elif by == "js":
            js_inserts[parent].append(_insert_js(o.kind, url[i], i))
        else:
            levels[i] = 1  # no level-1 parent of a usable type: referenced from the HTML instead
    head, body = [], []
    for i, o in enumerate(objs):
        if i == 0 or levels[i] != 1:
            continue
        u = url[i]
        if o.kind == "css":
            head.append(f'<link rel="stylesheet" href="{u}">')
        elif o.kind in ("js", "other"):
            body.append(f'<script src="{u}"></script>')
        elif o.kind == "img":
            body.append(f'<img src="{u}" width="1" height="1" alt="">')
        elif o.kind == "html":
            body.append(f'<iframe src="{u}" width="1" height="1"></iframe>')
        elif o.kind == "font":
            head.append(f"<style>@font-face{{font-family:F{i};src:url({u})}}.f{i}{{font-family:F{i}}}</style>")
            body.insert(0, f'<p class="f{i}">font {i}</p>')
    files, manifest = {}, []
    for i, o in enumerate(objs):
        if i == 0:
            text = (f"<!doctype html><html><head><meta charset=utf-8><title>{site.name}</title>{''.join(head)}"
                    f"</head><body><h1>{site.name}</h1>{''.join(html_extra)}{''.join(body)}</body></html>")
            data = _pad_text(text, o.size_bytes, "<!--", "-->", rng)
        elif o.kind == "css":
            data = _pad_text("".join(css_rules.get(i, [])) + f".c{i}{{color:#123}}", o.size_bytes, "/*", "*/", rng)
        elif o.kind in ("js", "other"):
            code = "".join(js_inserts.get(i, [])) + f"window.t{i}=1;"
            data = _pad_text(code, o.size_bytes, "/*", "*/", rng)
        elif o.kind == "html":
            data = _pad_text(f"<!doctype html><html><body>frame {i}</body></html>", o.size_bytes, "<!--", "-->", rng)
        elif o.kind == "img":
            data = _png(o.size_bytes, rng)
        else:
            data = rng.integers(0, 256, size=o.size_bytes, dtype=np.uint8).tobytes()
        path = f"o{o.origin}/{pdir}/{file_name(i, o.kind)}"
        files[path] = data
        manifest.append({"i": i, "path": path, "kind": o.kind, "origin": o.origin, "level": levels[i],
                         "size_bytes": len(data)})
    return files, manifest


def _insert_js(kind: str, url: str, i: int) -> str:
    """A statement in a level-1 script that makes the browser fetch a level-2 object (delaying the load event)."""
    u = json.dumps(url)
    el = {"css": f"var e=document.createElement('link');e.rel='stylesheet';e.href={u};",
          "img": f"var e=document.createElement('img');e.width=1;e.height=1;e.src={u};",
          "html": f"var e=document.createElement('iframe');e.width=1;e.height=1;e.src={u};"}
    make = el.get(kind, f"var e=document.createElement('script');e.src={u};")
    return f"(function(){{{make}document.body.appendChild(e);}})();"


def _pad_text(text: str, size: int, open_: str, close: str, rng) -> bytes:
    raw = text.encode()
    room = size - len(raw) - len(open_) - len(close)
    if room <= 0:
        return raw
    pad = base64.b64encode(rng.integers(0, 256, size=room, dtype=np.uint8).tobytes()).decode()[:room]
    return raw + open_.encode() + pad.encode() + close.encode()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png(size: int, rng) -> bytes:
    """A valid 1x1 grey PNG padded to ``size`` bytes with a private ancillary chunk ("paDd") of random bytes."""
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    tail = _chunk(b"IDAT", zlib.compress(b"\x00\x80")) + _chunk(b"IEND", b"")
    room = size - len(head) - len(tail) - 12
    pad = _chunk(b"paDd", rng.integers(0, 256, size=room, dtype=np.uint8).tobytes()) if room >= 0 else b""
    return head + pad + tail


def prepare_pages(workdir: Path, names=MEASURED_PAGES, seed: int = 1) -> dict:
    """Write cert, nginx.conf and every page's files into ``workdir``; return {"conf", "origins", "manifest"}."""
    require_tools("nginx", "openssl")
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    pages = catalog_pages(names)
    manifest, n_origins = {}, 1
    for j, (name, site) in enumerate(pages.items()):
        for http in ("2", "1.1"):  # same seed: identical bytes and sizes, only the port in URLs differs
            files, rows = build_page(site, seed * 1000 + j, http)
            for rel, data in files.items():
                path = workdir / "www" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        manifest[name] = rows
        n_origins = max(n_origins, site.n_origins)
    sans = ",".join([f"DNS:*.{DOMAIN}"] + [f"IP:{origin_ip(k)}" for k in range(n_origins)])
    _make_cert(require_tools("openssl")["openssl"], workdir, san=sans)
    servers = "".join(SERVER_BLOCK.format(ip=origin_ip(k), h2=H2_PORT, h1=H1_PORT, host=host(k), d=workdir, k=k)
                      for k in range(n_origins))
    for k in range(n_origins):
        (workdir / "www" / f"o{k}").mkdir(parents=True, exist_ok=True)
    conf = workdir / "nginx.conf"
    conf.write_text(NGINX_PAGES_CONF.format(d=workdir, conns=2048, servers=servers))
    (workdir / "manifest.json").write_text(json.dumps(manifest))
    return {"conf": conf, "origins": n_origins, "manifest": manifest}


def pages_server_cmd(conf: Path, n_origins: int, sysctl: str = "sysctl -qw net.ipv4.tcp_no_metrics_save=1") -> str:
    """Origin addresses on the server namespace's lo, its sysctls (no TCP metrics caching), nginx in the foreground."""
    nginx = require_tools("nginx")["nginx"]
    addrs = " && ".join(f"ip addr add {origin_ip(k)}/32 dev lo" for k in range(1, n_origins)) or "true"
    return f"{sysctl} && {addrs} && exec {nginx} -c {conf} -g 'daemon off;'"


def resolver_rules(n_origins: int) -> str:
    return ",".join(f"MAP {host(k)} {origin_ip(k)}" for k in range(n_origins))


def manifest_website(name: str, rows: list[dict]) -> Website:
    """The page as really served (levels after promotion, sizes after padding) as an oracle Website."""
    return make_page(name, [(r["size_bytes"], r["origin"], r["level"], r["kind"]) for r in rows])
