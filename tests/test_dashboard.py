"""Dashboard: a real manager on 127.0.0.1 fed real telemetry, rendered by headless Chromium."""

import json
import re
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest

from tailor.manager.api import create_app
from tailor.manager.config import ManagerConfig
from tailor.manager.synth import SyntheticEdge
from tailor.manager.testing import LiveServer
from tailor.space import ConfigSpace

CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "dash-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install -y chromium)")


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def feed(url: str, cycles: int = 6, n: int = 2000) -> None:
    space = ConfigSpace.named("core")
    rng = np.random.default_rng(0)
    default = space.configs[space.default_index].id
    factors = {c.id: 1.0 if c.id == default else float(rng.uniform(0.7, 1.4)) for c in space.configs}
    prefixes = [f"10.{i}.{j}.0/24" for i in range(2) for j in range(10)]
    edge = SyntheticEdge(prefixes, factor=lambda p, cid: factors[cid], seed=2)
    with httpx.Client(base_url=url, timeout=30, headers=AUTH) as c:
        for k in range(cycles):
            edge.apply(c.get("/v1/table").json())
            r = c.post("/v1/telemetry", content=json.dumps(edge.batch(n, 1_795_000_000.0 + 100 * k)), headers=AUTH)
            assert r.status_code == 202
            assert c.post("/v1/cycle", headers=AUTH).status_code == 200


def png_is_not_blank(path: Path) -> bool:
    """Decode the PNG with matplotlib and check it has many distinct colours (text, lines, tables)."""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(path))
    assert img.shape[0] >= 800 and img.shape[1] >= 1200
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    return len(colours) > 20 and float(img[..., :3].std()) > 0.02


def test_dashboard_shows_groups_and_numbers(tmp_path):
    cfg = ManagerConfig(data_dir=str(tmp_path / "data"), token=TOKEN, update_freq_s=0)
    app = create_app(cfg)
    with LiveServer(app) as url:
        feed(url)
        mgr = app.state.manager
        groups = [g["id"] for g in mgr.current.doc["groups"]]
        shot = tmp_path / "dashboard.png"
        assert httpx.get(url + "/").status_code == 401  # the dashboard lists client prefixes: operator only
        page = url.replace("http://", f"http://operator:{TOKEN}@", 1) + "/"  # HTTP Basic, token as password
        r = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", page)
        assert shot.exists(), r.stderr[-2000:]
        dom = chromium(tmp_path, "--dump-dom", page).stdout
    assert png_is_not_blank(shot)
    assert len(groups) > 1
    for gid in groups[:10]:
        assert gid in dom
    assert f"<b>table version</b>: {mgr.current.version}" in dom
    assert "<b>records accepted</b>: 12000" in dom
    assert re.search(r"<polyline[^>]+points=\"[0-9.]+,[0-9.]+ [0-9.]+", dom)  # a plotted line with >1 point
    for gid in groups[:3]:
        row = re.search(re.escape(gid) + r"</td>.*?</tr>", dom, re.S).group(0)
        n = mgr.guard.pooled(gid).n
        assert f'<td class="num">{n}</td>' in row  # the treated count fed for that group
