"""``tailor manager``: build the config from the command line and run uvicorn."""

from __future__ import annotations

import logging
import os

from tailor.errors import check
from tailor.manager import logs
from tailor.manager.config import ManagerConfig
from tailor.policies.base import parse_policy_params  # noqa: F401 (the manager's --policy-param)


def add_arguments(p) -> None:
    p.add_argument("--listen", default="127.0.0.1:8470", help="HOST:PORT (default 127.0.0.1:8470)")
    p.add_argument("--data", required=True, help="data directory (DuckDB store and learned state)")
    p.add_argument("--policy", default="configanator", help="registered policy name (default configanator)")
    p.add_argument("--space", default="core", help="named configuration space (default core)")
    p.add_argument("--allowed", default="", help="AllowedConfig, e.g. NoBBR,NoHighICW,tcp.initial_cwnd<=32")
    p.add_argument("--update-freq", type=float, default=10.0, help="seconds between update cycles (default 10)")
    p.add_argument("--holdback", type=float, default=0.2, help="share of connections kept on the default (0.2)")
    p.add_argument("--retention-days", type=float, default=7.0, help="telemetry retention in days (default 7)")
    p.add_argument("--explore-budget", type=float, default=0.1, help="max non-greedy mass per group (0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policy (default 0)")
    p.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of the policy, e.g. epsilon=0.3 for mab-nc (repeatable)")
    p.add_argument("--insecure-dev", action="store_true", help="accept writes without a token (development only)")


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    check(bool(host) and port.isdigit() and 0 < int(port) < 65536, "tailor manager", "listen", "HOST:PORT", text)
    return host.strip("[]"), int(port)




def config_from_args(args, environ=os.environ) -> ManagerConfig:
    return ManagerConfig(data_dir=args.data, policy=args.policy, space=args.space, allowed=args.allowed,
                         update_freq_s=args.update_freq, holdback=args.holdback, retention_days=args.retention_days,
                         explore_budget=args.explore_budget, seed=args.seed, token=environ.get("TAILOR_TOKEN") or None,
                         insecure_dev=args.insecure_dev,
                         policy_params=parse_policy_params(getattr(args, "policy_param", []) or [], "tailor manager"))


def run(args) -> int:
    import uvicorn

    from tailor.manager.api import create_app

    host, port = parse_listen(args.listen)
    cfg = config_from_args(args)
    logs.setup(logging.INFO)
    app = create_app(cfg)
    logs.log("manager.start", host=host, port=port, data=cfg.data_dir, policy=cfg.policy, space=cfg.space)
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)
    return 0
