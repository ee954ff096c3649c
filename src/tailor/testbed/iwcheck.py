"""`tailor testbed check-iw`: the initial window on the wire equals the configured one.

Why this exists: ``initcwnd`` is applied per route, and a silent failure (wrong route, option ignored, the
client's receive window capping the flight) would make every IW comparison in the dataset meaningless. The
check fetches a 100 KB object over cleartext HTTP/1.1 (so the first flight is pure response data, no TLS
records) and captures the server's TUN device with tcpdump *inside the server namespace*. The first flight is
every data segment sent before the first gap longer than RTT/2: the next flight can only start once ACKs
return, one RTT after the first segment.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tailor.testbed.plan import Transport
from tailor.testbed.server import PLAIN_PORT, SERVER_IP, object_name, prepare_site, require_tools, server_cmd

OBJECT_BYTES = 100 * 1024
_LINE = re.compile(r"^(\d+\.\d+) IP (\S+)\.(\d+) > (\S+)\.(\d+): .*length (\d+)")


@dataclass(frozen=True)
class IWResult:
    cc: str
    iw: int
    first_flight: int
    second_flight: int
    data_packets: int

    @property
    def ok(self) -> bool:
        return self.first_flight == self.iw


def first_flights(lines: list[str], rtt_ms: float) -> tuple[int, int, int]:
    """(first flight, second flight, all data packets) of the server's data segments in tcpdump -tt text.

    >>> pkt = "{:.4f} IP 10.231.0.1.8080 > 10.231.0.2.5000: Flags [.], seq 1:1449, ack 1, length 1448"
    >>> first_flights([pkt.format(t) for t in (1.0, 1.001, 1.002, 1.2, 1.201)], rtt_ms=200)
    (3, 2, 5)
    """
    times = []
    for line in lines:
        m = _LINE.match(line.strip())
        if m and m.group(2) == SERVER_IP and int(m.group(3)) == PLAIN_PORT and int(m.group(6)) > 0:
            times.append(float(m.group(1)))
    flights, gap = [], rtt_ms / 2000.0
    for i, t in enumerate(times):
        if i == 0 or t - times[i - 1] > gap:
            flights.append(0)
        flights[-1] += 1
    return (flights[0] if flights else 0, flights[1] if len(flights) > 1 else 0, len(times))


def check_iw(tl_bin: str, cc: str, iw: int, rtt_ms: float = 200.0, rate_mbit: float = 20.0) -> IWResult:
    """One emulator run: capture the server side of a cleartext fetch and count its first flight."""
    tools = require_tools("tcpdump", "curl", "ip")
    with tempfile.TemporaryDirectory(prefix="tailor-iw-") as tmp:
        d = Path(tmp)
        conf = prepare_site(d, [OBJECT_BYTES])
        pcap = d / "cap.pcap"
        client = (f"ip netns exec $TL_SERVER_NS timeout 30 {tools['tcpdump']} -i tl-s -n -U -w {pcap} "
                  f"'tcp src port {PLAIN_PORT}' 2>/dev/null & P=$!; sleep 1; "
                  f"curl -s --http1.1 -o /dev/null http://{SERVER_IP}:{PLAIN_PORT}/{object_name(OBJECT_BYTES)}; "
                  f"sleep 0.5; kill -INT $P; wait $P; true")
        bdp_packets = int(rate_mbit * 1e6 / 8 * rtt_ms / 1000 / 1500) + 64
        cmd = [tl_bin, "run", "--delay", f"{rtt_ms / 2:g}", "--down-rate-mbit", f"{rate_mbit:g}",
               "--up-rate-mbit", f"{rate_mbit:g}", "--queue-packets", str(bdp_packets),
               "--route-opts", Transport(cc, iw).route_opts(), "--timeout", "40s", "--wait-port", str(PLAIN_PORT),
               "--server-cmd", server_cmd(conf), "--client-cmd", client]
        subprocess.run(cmd, capture_output=True, text=True, timeout=90)
        text = subprocess.run([tools["tcpdump"], "-r", str(pcap), "-n", "-tt"], capture_output=True,
                              text=True, timeout=30).stdout if pcap.exists() else ""
    return IWResult(cc, iw, *first_flights(text.splitlines(), rtt_ms))
