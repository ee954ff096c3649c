"""ConnReuse baseline (Configanator §6.5): inherits the previous connection's window within keep-alive."""

from tailor.policies import Context, Outcome, PolicyEnv, make_policy
from tailor.scenario import ClientInfo
from tailor.space import ConfigSpace

CLIENT = ClientInfo("10.0.0.7", "10.0.0.0/24", 64500, "r", "desktop", "cable")


def _ctx(t: float, client: ClientInfo = CLIENT) -> Context:
    return Context(t, "s", client, "page-light-1", 40.0, None)


def _policy(**kw):
    space = ConfigSpace.named("core")
    return make_policy("connreuse", reuse_probability=1.0, **kw).reset(space, PolicyEnv()), space


def test_reused_connection_inherits_its_window_as_iw():
    policy, space = _policy()
    first = policy.select(_ctx(0.0))
    assert first.config == space.default_index  # nothing to reuse yet
    # 10 Mbit/s x 40 ms = 50 KB = 34.5 segments -> the largest grid IW not above it is 32
    policy.observe(_ctx(0.0), first, Outcome(500.0, 10.0, 40.0, 0.0, 100_000))
    d = policy.select(_ctx(30.0))
    assert d.arm == "reuse" and space.configs[d.config]["tcp.initial_cwnd"] == 32
    assert space.configs[d.config]["tcp.congestion_control"] == "cubic" and space.configs[d.config]["http.version"] == "1.1"


def test_no_reuse_after_keepalive_or_for_another_client():
    policy, space = _policy(keepalive_s=75.0)
    policy.observe(_ctx(0.0), policy.select(_ctx(0.0)), Outcome(500.0, 10.0, 40.0, 0.0, 100_000))
    assert policy.select(_ctx(100.0)).config == space.default_index
    other = ClientInfo("10.0.0.8", "10.0.0.0/24", 64500, "r", "desktop", "cable")
    assert policy.select(_ctx(10.0, other)).config == space.default_index
