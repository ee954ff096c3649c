"""Hand-writable scenario files: parse everything, report every problem at once, then build.

Grammar and an example: docs/scenarios.md and data/scenarios/example.scn. ``load_scenario`` accepts a
built-in name (-> ``generate``) or a path. A malformed file raises ONE :class:`ScenarioError` whose
first line is the first problem as ``<file>:<line>: <directive> field '<field>' must be <rule>. Got <value>.``
and which lists the other problems (up to ``MAX_PROBLEMS``) below it; nothing is partially loaded.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tailor import paths
from tailor.errors import ScenarioError
from tailor.scenario import syntax
from tailor.scenario.generate import BUILTIN_SCENARIOS, generate
from tailor.scenario.importers import MIN_BW_MBPS, load_trace
from tailor.scenario.model import ClientInfo, ConditionSeries, Scenario, Session
from tailor.scenario.syntax import SCHEMA, Bad

MAX_PROBLEMS = 20
REPO_ROOT = paths.ROOT  # relative trace paths such as data/traces/x resolve here too


def load_scenario(path_or_name, *, n_sessions: int | None = None, seed: int = 0, websites=None) -> Scenario:
    """A built-in scenario by name, or a scenario file by path (``n_sessions`` keeps its first N sessions)."""
    if isinstance(path_or_name, str) and path_or_name in BUILTIN_SCENARIOS:
        kw = {} if n_sessions is None else {"n_sessions": n_sessions}
        return generate(path_or_name, seed=seed, websites=websites, **kw)
    if not Path(path_or_name).is_file():
        raise ScenarioError(f"{path_or_name}: neither a scenario file nor a built-in scenario "
                            f"({', '.join(BUILTIN_SCENARIOS)})")
    scenario = _Parser(Path(path_or_name), websites).run()
    return scenario if n_sessions is None else scenario.head(n_sessions)


@dataclass
class _SessionSpec:
    line: int
    fields: dict
    nets: list = field(default_factory=list)  # (line, fields)
    loads: list = field(default_factory=list)  # (line, t, site)
    broken: bool = False


class _Parser:
    """Two passes: ``_parse_line`` checks every line into specs; ``_build`` makes the model objects."""

    def __init__(self, path: Path, websites=None):
        self.path, self.websites = path, (set(websites) if websites is not None else None)
        self.problems: list[str] = []
        self.header_seen = False
        self.scenario_fields: dict = {}
        self.provenance: dict = {}
        self.sessions: list[_SessionSpec] = []
        self.ids: dict[str, int] = {}
        self.traces: dict[Path, np.ndarray] = {}

    def run(self) -> Scenario:
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ScenarioError(f"{self.path}: cannot read scenario file ({exc})") from exc
        for number, line in enumerate(text.splitlines(), 1):
            if len(self.problems) >= MAX_PROBLEMS:
                break
            self._parse_line(number, line)
        if not self.header_seen and not self.problems:
            self._problem(1, "file", "header", f"start with '{syntax.FORMAT_HEADER} {syntax.FORMAT_VERSION}'", "")
        self._raise_if_problems()
        scenario = self._build()
        self._raise_if_problems()
        return scenario

    def _problem(self, line: int, directive: str, field_name: str, rule: str, got) -> None:
        self.problems.append(f"{self.path}:{line}: {directive} field {field_name!r} must be {rule}. Got {got!r}.")

    def _raise_if_problems(self) -> None:
        if not self.problems:
            return
        more = len(self.problems) - 1
        tail = f"\n{more} more problem(s) in this file:\n  " + "\n  ".join(self.problems[1:]) if more else ""
        raise ScenarioError(self.problems[0] + tail)

    # ---- pass 1: lines -------------------------------------------------------------------------------

    def _parse_line(self, number: int, line: str) -> None:
        try:
            tokens = syntax.tokenize(line)
        except Bad as bad:
            return self._problem(number, "line", "quoting", bad.args[0], line.strip())
        if not tokens:
            return
        directive, rest = tokens[0], tokens[1:]
        if not self.header_seen:
            return self._header(number, directive, rest)
        if directive == "provenance":
            return self._provenance(number, rest)
        if directive not in SCHEMA:
            known = ", ".join(["provenance", *SCHEMA])
            return self._problem(number, "line", "directive", f"one of {known}", directive)
        fields = self._fields(number, directive, rest)
        if fields is not None:
            getattr(self, f"_on_{directive}")(number, fields)
        elif directive == "session":  # keep following net/load lines attached to a (broken) session
            self.sessions.append(_SessionSpec(number, {}, broken=True))

    def _header(self, number: int, directive: str, rest: list[str]) -> None:
        self.header_seen = True
        if directive != syntax.FORMAT_HEADER or rest != [syntax.FORMAT_VERSION]:
            got = " ".join([directive, *rest])
            self._problem(number, "file", "header", f"'{syntax.FORMAT_HEADER} {syntax.FORMAT_VERSION}'", got)

    def _provenance(self, number: int, rest: list[str]) -> None:
        fields, problems = syntax.split_fields(rest)
        for p in problems:
            self._problem(number, "provenance", "syntax", "key=value", p)
        for key, value in fields.items():
            try:
                self.provenance[key] = syntax.parse_provenance_value(value)
            except Bad as bad:
                self._problem(number, "provenance", key, bad.args[0], value)

    def _fields(self, number: int, directive: str, rest: list[str]) -> dict | None:
        """Converted fields of one line, or None after recording its problems."""
        raw, problems = syntax.split_fields(rest)
        n_before = len(self.problems)
        for p in problems:
            self._problem(number, directive, "syntax", "key=value, each key once", p)
        schema, out = SCHEMA[directive], {}
        for key, value in raw.items():
            if key not in schema:
                self._problem(number, directive, key, f"one of the known fields ({', '.join(schema)})", key)
                continue
            try:
                out[key] = schema[key][0](value)
            except Bad as bad:
                self._problem(number, directive, key, bad.args[0], value)
        for key, (_, required) in schema.items():
            if required and key not in raw:
                self._problem(number, directive, key, "given (required field)", None)
        return out if len(self.problems) == n_before else None

    def _on_scenario(self, number: int, fields: dict) -> None:
        if self.scenario_fields or self.sessions:
            return self._problem(number, "scenario", "line", "given once, before any session", "scenario")
        self.scenario_fields = fields

    def _on_session(self, number: int, fields: dict) -> None:
        spec = _SessionSpec(number, fields)
        self.sessions.append(spec)
        if fields["id"] in self.ids:
            spec.broken = True
            return self._problem(number, "session", "id", f"unique (also used on line {self.ids[fields['id']]})",
                                 fields["id"])
        self.ids[fields["id"]] = number
        if ipaddress.ip_address(fields["client"]) not in ipaddress.ip_network(fields["prefix"]):
            spec.broken = True
            self._problem(number, "session", "client", f"inside prefix {fields['prefix']}", fields["client"])

    def _current(self, number: int, directive: str) -> _SessionSpec | None:
        if not self.sessions:
            self._problem(number, directive, "line", "inside a session (after a 'session' line)", directive)
            return None
        return self.sessions[-1]

    def _on_net(self, number: int, fields: dict) -> None:
        spec = self._current(number, "net")
        if spec is None:
            return
        first = not spec.nets
        if first and fields["t"] != 0:
            return self._problem(number, "net", "t", "0 on a session's first net line", fields["t"])
        if not first and fields["t"] <= spec.nets[-1][1]["t"]:
            prev = spec.nets[-1]
            return self._problem(number, "net", "t", f"greater than {prev[1]['t']:g} (line {prev[0]})", fields["t"])
        if "bw" in fields and "trace" in fields:
            return self._problem(number, "net", "bw", "absent when 'trace' is given (bandwidth comes from the trace)",
                                 fields["bw"])
        if "trace_offset" in fields and "trace" not in fields:
            return self._problem(number, "net", "trace_offset", "given only with 'trace'", fields["trace_offset"])
        for key in ("rtt", "bw") if first else ():
            if key not in fields and not (key == "bw" and "trace" in fields):
                return self._problem(number, "net", key, "given on a session's first net line ('bw' or 'trace')"
                                     if key == "bw" else "given on a session's first net line", None)
        if "trace" in fields:
            resolved = self._resolve_trace(fields["trace"])
            if resolved is None:
                return self._problem(number, "net", "trace", "an existing trace file (relative paths are tried "
                                     "from the scenario file's folder, the repository root, then the cwd)",
                                     fields["trace"])
            fields["trace"] = resolved
        spec.nets.append((number, fields))

    def _resolve_trace(self, name: str) -> Path | None:
        p = Path(name)
        candidates = [p] if p.is_absolute() else [self.path.parent / p, REPO_ROOT / p, Path.cwd() / p]
        return next((c for c in candidates if c.is_file()), None)

    def _on_load(self, number: int, fields: dict) -> None:
        spec = self._current(number, "load")
        if spec is None:
            return
        if not spec.nets and not spec.broken:
            return self._problem(number, "load", "t", "after the session's first net line (no condition yet)",
                                 fields["t"])
        if spec.loads and fields["t"] < spec.loads[-1][1]:
            prev = spec.loads[-1]
            return self._problem(number, "load", "t", f">= {prev[1]:g} (previous load, line {prev[0]})", fields["t"])
        if self.websites is not None and fields["site"] not in self.websites:
            return self._problem(number, "load", "site", "a website known to the oracle", fields["site"])
        spec.loads.append((number, fields["t"], fields["site"]))

    # ---- pass 2: build -----------------------------------------------------------------------------------

    def _build(self) -> Scenario:
        chunk = self.scenario_fields.get("chunk", 5.0)
        sessions = []
        for spec in self.sessions:
            if not spec.nets:
                self._problem(spec.line, "session", "net", "followed by at least one net line", None)
                continue
            try:
                sessions.append(self._session(spec, chunk))
            except _Skip:
                continue
            except ScenarioError as exc:  # model invariants; the line checks above should prevent these
                self.problems.append(f"{self.path}:{spec.line}: session {spec.fields['id']!r}: {exc}")
        name = self.scenario_fields.get("name", self.path.stem)
        description = self.scenario_fields.get("description", "")
        provenance = self.provenance or {"file": str(self.path)}
        return Scenario(name, tuple(sessions), chunk, description, provenance)

    def _session(self, spec: _SessionSpec, chunk: float) -> Session:
        f = spec.fields
        client = ClientInfo(f["client"], f["prefix"], f["asn"], f["region"], f["device"], f["access"])
        loads = tuple((t, site) for _, t, site in spec.loads)
        conditions = self._series(spec, chunk)
        return Session(f["id"], client, f["start"], conditions, loads)

    def _series(self, spec: _SessionSpec, chunk: float) -> ConditionSeries:
        """Expand net lines into steps: one per net line, plus one per chunk while a trace gives the bandwidth."""
        last_t = max([n[1]["t"] for n in spec.nets] + [t for _, t, _ in spec.loads])
        end = spec.fields.get("end", (np.floor(last_t / chunk) + 1) * chunk)
        state: dict = {"loss": 0.0}
        t_s, bw, rtt, loss = [], [], [], []
        for i, (number, f) in enumerate(spec.nets):
            state.update({k: v for k, v in f.items() if k in ("bw", "rtt", "loss")})
            if "bw" in f:
                state.pop("trace", None)
            if "trace" in f:
                state["trace"] = (self._trace(number, f["trace"], chunk), f["t"], f.get("trace_offset", 0.0))
            stop = spec.nets[i + 1][1]["t"] if i + 1 < len(spec.nets) else max(end, f["t"] + chunk)
            for t in self._step_times(f["t"], stop, chunk, "trace" in state):
                t_s.append(t)
                bw.append(self._trace_bw(state["trace"], t, chunk) if "trace" in state else state["bw"])
                rtt.append(state["rtt"])
                loss.append(state["loss"])
        buffer_bdp = spec.fields.get("buffer", 1.0)
        return ConditionSeries(np.array(t_s), np.array(bw), np.array(rtt), np.array(loss), buffer_bdp)

    @staticmethod
    def _step_times(start: float, stop: float, chunk: float, traced: bool) -> np.ndarray:
        return np.arange(start, stop, chunk) if traced else np.array([start])

    @staticmethod
    def _trace_bw(trace, t: float, chunk: float) -> float:
        values, t0, offset = trace
        value = float(values[int((offset + t - t0) // chunk) % len(values)])
        return max(float(f"{value:.6g}"), MIN_BW_MBPS)  # 6 digits keep saved files readable

    def _trace(self, number: int, path: Path, chunk: float) -> np.ndarray:
        if path not in self.traces:
            try:
                self.traces[path] = load_trace(path, chunk)[1]
            except ScenarioError as exc:
                self._problem(number, "net", "trace", "a well-formed trace file", str(exc))
                raise _Skip from None
        return self.traces[path]


class _Skip(Exception):
    """A session could not be built; its problem is already recorded."""


def save_scenario(scenario: Scenario, path: str | os.PathLike) -> None:
    """Write ``scenario`` in the file format (trace-driven bandwidth is written out step by step)."""
    lines = [f"{syntax.FORMAT_HEADER} {syntax.FORMAT_VERSION}",
             syntax.format_line("scenario", {"name": scenario.name, "chunk": float(scenario.chunk_s),
                                             "description": scenario.description})]
    for key, value in scenario.provenance.items():
        lines.append(syntax.format_line("provenance", {key: syntax.format_provenance_value(value)}))
    for s in scenario.sessions:
        lines += _session_lines(s)
    Path(path).write_text("\n".join(lines) + "\n")


def _session_lines(s: Session) -> list[str]:
    c, cond = s.client, s.conditions
    head = {"id": s.session_id, "client": c.client_id, "prefix": c.prefix, "asn": c.asn, "region": c.region,
            "device": c.device, "access": c.access, "start": float(s.start_s), "buffer": float(cond.buffer_bdp)}
    out = ["", syntax.format_line("session", head)]
    for t, b, r, p in zip(cond.t_s, cond.bw_mbps, cond.rtt_ms, cond.loss):
        out.append(syntax.format_line("net", {"t": float(t), "bw": float(b), "rtt": float(r), "loss": float(p)}))
    out += [syntax.format_line("load", {"t": float(t), "site": site}) for t, site in s.loads]
    return out
