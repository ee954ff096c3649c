"""The ``tailor demo`` options and the demo's client groups (kept free of heavy imports: every CLI call builds
the parser). The demo itself is :mod:`tailor.demo.run`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupSpec:
    name: str
    condition: str
    workers: int


# Workers per group: more where a fetch takes longer, so every group reaches the ~150 connections the
# manager's stickiness needs (30 samples of a candidate at a ~20% probing share) within a quick run.
GROUPS = (GroupSpec("broadband", "dsl25-peak", 1), GroupSpec("4g", "4g-peak", 3), GroupSpec("3g", "3g-peak", 3),
          GroupSpec("developing", "dev-5m-5pct", 6), GroupSpec("satellite", "geo-hughesnet", 16))
# explore more than the policies' production defaults: the demo has minutes, not hours, and a handful of clients
DEFAULT_POLICY_PARAMS = {"mab-nc": ["epsilon=0.3"], "tailor": ["alpha=0.1", "explore_share=0.3"]}


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="the closed loop with real edges in namespaces (root; docs/demo.md)")
    p.add_argument("--seed", type=int, default=0, help="seeds the links' loss, the workload and the policy (0)")
    p.add_argument("--out", default=None, help="output directory (default out/demo-s<seed>)")
    p.add_argument("--quick", action="store_true", help="about 4 minutes instead of about 9")
    p.add_argument("--policy", default="tailor", help="the manager's policy (default tailor, the manager's own default)")
    p.add_argument("--duration", type=float, default=None,
                   help="workload seconds (default 480, --quick 180; at most 600)")
    p.add_argument("--round", type=float, default=None, help="seconds per update round (default 30, --quick 15)")
    p.add_argument("--explore-budget", type=float, default=0.8,
                   help="the manager's exploration budget per group (default 0.8, so a candidate gets the "
                        "30 samples stickiness needs within minutes)")
    p.add_argument("--policy-param", action="append", default=None, metavar="KEY=VALUE",
                   help="passed to the manager (default for tailor: alpha=0.1, explore_share=0.3; mab-nc: epsilon=0.3)")
    p.add_argument("--groups", default=None, help="comma list of groups to run (default all: "
                   + ",".join(g.name for g in GROUPS) + ")")
