"""`tailor probe HOST[:PORT]`: run tailor-probe, which fingerprints a server's configuration from outside.

The measuring is done by the Go binary ``tailor-probe`` (edge/cmd/tailor-probe, docs/probe.md): TLS, ALPN,
HTTP/2 SETTINGS and Alt-Svc for anyone; the initial window and the SYN-ACK retransmission timeout as root.
This module locates it (``$TAILOR_PROBE``, else ``out/bin/tailor-probe`` rebuilt from edge/ when stale, as the
testbed's binaries are) and passes the arguments through; its exit status is the command's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from tailor.paths import go_binary

PROBE_TIMEOUT_S = 120  # every step of the binary is bounded (5 s each, 3.5 s SYN-ACK wait); this bounds the whole


def probe_binary() -> str:
    """$TAILOR_PROBE, else out/bin/tailor-probe built from edge/."""
    return go_binary("tailor-probe", "TAILOR_PROBE")


def add_parser(sub) -> None:
    p = sub.add_parser("probe", help="fingerprint a server's TCP/TLS/HTTP configuration from outside (docs/probe.md)")
    p.add_argument("target", metavar="HOST[:PORT]", help="the server (port 443 by default); only your own hosts")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--i-own-this-host", action="store_true",
                   help="allow a target that is neither loopback nor on a link of this host (a server you operate)")
    p.add_argument("--sni", default=None, help="TLS server name and Host header")
    p.add_argument("--path", default=None, help="object fetched for the initial window (larger than IW x MSS)")
    p.add_argument("--plain", action="store_true", help="the target speaks cleartext HTTP/1.1 (exact initial window)")
    p.add_argument("--mss", type=int, default=None, help="TCP_MAXSEG of the initial-window connection (88..65495)")
    p.add_argument("--synack-wait", default=None, help="wait for the first SYN-ACK retransmission (e.g. 3.5s)")
    p.add_argument("--iw-trials", type=int, default=None,
                   help="initial-window measurements, 1..5 (default 2); the smallest complete count is reported")


def binary_args(args: argparse.Namespace) -> list[str]:
    """The tailor-probe command line for parsed ``tailor probe`` arguments."""
    out = []
    if args.json:
        out.append("--json")
    if args.i_own_this_host:
        out.append("--i-own-this-host")
    if args.plain:
        out.append("--plain")
    for flag, value in (("--sni", args.sni), ("--path", args.path), ("--mss", args.mss),
                        ("--synack-wait", args.synack_wait), ("--iw-trials", args.iw_trials)):
        if value is not None:
            out.append(f"{flag}={value}")
    return [*out, "--", args.target]


def run_probe(args: argparse.Namespace) -> int:
    cmd = [probe_binary(), *binary_args(args)]
    try:
        return subprocess.run(cmd, stdout=sys.stdout, stderr=sys.stderr, timeout=PROBE_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        print(f"tailor: error: tailor-probe did not finish within {PROBE_TIMEOUT_S} s", file=sys.stderr)
        return 1
