"""The demo's world: network namespaces, links and processes it creates, and removes again.

Everything is named after the demo's PID (``tdm<pid>-srv``, ``tdm<pid>-c<i>``) so concurrent runs and
leftovers are told apart; :meth:`World.close` stops every process it started (by PID: SIGTERM to its
process group, then SIGKILL) and deletes every namespace it created, on normal exit, on an exception and
on SIGINT/SIGTERM (the caller turns those into ``KeyboardInterrupt``). :func:`leftovers` lists namespaces
of a given prefix, for tests.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tailor.demo.binaries import DemoError

NS_DIR = Path("/run/netns")


# sysctls of every namespace the demo creates (each set, then read back; a refused one stops the demo)
NETNS_SYSCTLS = (("net.ipv6.conf.all.disable_ipv6", "1"), ("net.ipv6.conf.default.disable_ipv6", "1"),
                 ("net.ipv4.tcp_no_metrics_save", "1"))  # no cached ssthresh/RTT leaks between connections


def _run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """``cmd``'s result; a timeout or a missing program is a result too (returncode -1, the reason in stderr)."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, -1, "", f"no answer within {timeout_s:g} s")
    except OSError as err:
        return subprocess.CompletedProcess(cmd, -1, "", str(err))


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    res = _run(["ip", *args], 30)
    if check and res.returncode != 0:
        raise DemoError(f"`ip {' '.join(args)}` failed (exit {res.returncode}): {res.stderr.strip()[-300:]}")
    return res


def in_netns(ns: str) -> list[str]:
    """The prefix running a command inside network namespace ``ns``."""
    return ["ip", "netns", "exec", ns]


def ns_run(ns: str, what: str, *cmd: str, timeout_s: float = 10.0) -> subprocess.CompletedProcess:
    """``cmd`` run inside namespace ``ns``, checked: a non-zero exit, a timeout or a missing program is one
    :class:`DemoError` naming the namespace, ``what`` the command was for, and its stderr. (Until 2026-12-07 the
    demo ignored its namespaces' sysctl exit codes: a refused setting gave a demo measuring something else.)"""
    res = _run([*in_netns(ns), *cmd], timeout_s)
    if res.returncode != 0:
        err = res.stderr.strip()[-300:] or "(no stderr)"
        raise DemoError(f"namespace {ns}: {what}: `{' '.join(cmd)}` failed (exit {res.returncode}): {err}")
    return res


SYSCTL_KEY = re.compile(r"[A-Za-z0-9_\-]+(?:[./][A-Za-z0-9_\-]+)*")


def sysctl(ns: str, key: str, value: str) -> None:
    """Set sysctl ``key`` to ``value`` in namespace ``ns`` and read it back (a kernel may take a write and keep
    another value); either failing is one DemoError naming the namespace, the setting and the shell's stderr.

    Writes and reads ``/proc/sys/<key>`` inside the namespace with ``sh`` (no ``sysctl`` program: minimal hosts
    have no procps); a key's dots are the path's slashes, as sysctl spells them (a slash in a key is a dot)."""
    if not SYSCTL_KEY.fullmatch(key):
        raise DemoError(f"namespace {ns}: setting {key}={value}: not a sysctl key")
    path = "/proc/sys/" + key.translate(str.maketrans("./", "/."))
    got = ns_run(ns, f"setting {key}={value}", "sh", "-c", 'printf %s "$2" > "$1" && cat "$1"', "sh", path,
                 value).stdout.strip()
    if got.split() != value.split():
        raise DemoError(f"namespace {ns}: setting {key}={value}: the kernel kept {got!r}")


def _warn(msg: str) -> None:
    print(f"tailor demo: cleanup: {msg}", file=sys.stderr, flush=True)


def leftovers(prefix: str) -> list[str]:
    """Namespaces under /run/netns whose name starts with ``prefix``."""
    if not NS_DIR.exists():
        return []
    return sorted(p.name for p in NS_DIR.iterdir() if p.name.startswith(prefix))


def cgroups_left(paths: list[Path]) -> list[str]:
    return [str(p) for p in paths if p.exists()]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is gone for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path


@dataclass
class World:
    prefix: str  # e.g. tdm1234-
    workdir: Path
    namespaces: list[str] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    cgroups: list[Path] = field(default_factory=list)  # created by processes we started (tailor-agent)
    closed: bool = False

    def netns(self, suffix: str) -> str:
        name = f"{self.prefix}{suffix}"
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        for key, value in NETNS_SYSCTLS:
            if key.startswith("net.ipv6.") and not Path("/proc/sys/net/ipv6").exists():
                continue  # a kernel without IPv6 (ipv6.disable=1): what disable_ipv6 is for holds already
            sysctl(name, key, value)
        return name

    def spawn(self, name: str, cmd: list[str], env: dict | None = None, without: tuple[str, ...] = ()) -> Proc:
        """Start ``cmd`` in its own session (so it and its children are stopped as a group), log to a file; its
        environment is this process's without the variables ``without`` names, plus ``env``."""
        log = self.workdir / f"{name}.log"
        fh = open(log, "ab")
        base = {k: v for k, v in os.environ.items() if k not in without}
        try:
            popen = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env={**base, **(env or {})})
        finally:
            fh.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the process group of ``proc`` (by its PID), wait, then SIGKILL it."""
        p = proc.popen
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        else:  # the leader is gone; children in its group may not be
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return p.returncode

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is not None and proc.name != "manager-killed":
                tail = proc.log.read_text(errors="replace")[-600:] if proc.log.exists() else ""
                raise DemoError(f"{proc.name} (pid {proc.popen.pid}) exited with {proc.popen.returncode}: {tail}")

    def close(self) -> list[str]:
        """Stop every process (reverse start order), delete every namespace; returns problems found."""
        if self.closed:
            return []
        self.closed = True
        problems = []
        for proc in reversed(self.procs):
            try:
                self.stop(proc)
            except Exception as err:  # keep cleaning up
                problems.append(f"stopping {proc.name}: {err}")
        for cg in self.cgroups:  # normally removed by the agent itself; not if it had to be SIGKILLed
            if cg.exists():
                try:
                    for pid in (cg / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)  # our edge, started inside it
                        except ProcessLookupError:  # it ended since the read: the others still go, the cgroup too
                            pass
                    time.sleep(0.2)
                    cg.rmdir()
                except OSError as err:
                    problems.append(f"cgroup {cg}: {err}")
        for ns in reversed(self.namespaces):  # best effort: every namespace is tried; failures logged, reported
            res = ip("netns", "pids", ns, check=False)
            if res.returncode != 0:
                _warn(f"`ip netns pids {ns}` failed (exit {res.returncode}): {res.stderr.strip()[-300:]}")
            for pid in res.stdout.split():  # processes we started inside our own namespace (curl leftovers)
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            for _ in range(50):
                res = ip("netns", "delete", ns, check=False)
                if res.returncode == 0 or not (NS_DIR / ns).exists():
                    break
                time.sleep(0.1)
            else:
                _warn(f"`ip netns delete {ns}` failed (exit {res.returncode}): {res.stderr.strip()[-300:]}")
                problems.append(f"namespace {ns} could not be deleted: {res.stderr.strip()[-200:]}")
        return problems
