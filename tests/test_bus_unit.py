"""tailor.bus without a server: partition vectors, rendezvous ownership, authenticated state, cluster document."""

import json
import pickle

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tailor.bus import setup as S
from tailor.bus.partition import assignment, fnv1a32, owner, partition
from tailor.bus.state import MAGIC, StateError, Watermark, open_sealed, seal, state_key
from tailor.errors import ParameterError
from tailor.paths import SPEC_DIR


def test_partition_vectors():
    doc = json.loads((SPEC_DIR / "vectors" / "bus" / "partition.json").read_text())
    assert doc["cases"]
    for case in doc["cases"]:
        assert fnv1a32(case["client_prefix"].encode()) == case["fnv1a32"]
        for p, want in case["partition"].items():
            assert partition(case["client_prefix"], int(p)) == want, (case["client_prefix"], p)


def test_rendezvous_ownership_is_stable_and_minimal():
    shards = ["a", "b", "c"]
    before = assignment(64, shards)
    assert set(before.values()) == set(shards)  # 64 partitions over 3 shards: each gets some
    assert assignment(64, reversed(shards)) == before  # order of the live set does not matter
    after = assignment(64, ["a", "c"])  # b dies: only b's partitions move
    assert all(after[p] == o for p, o in before.items() if o != "b")
    assert all(after[p] in ("a", "c") for p in after)
    assert owner(0, []) is None


def _key():
    return state_key(Ed25519PrivateKey.generate())


def test_state_round_trip_and_watermark():
    key = _key()
    wm = Watermark(10, {12, 15})
    blob = seal(key, 3, wm, pickle.dumps({"fed_seq": 7}))
    header, got, state = open_sealed(key, 3, blob)
    assert state == {"fed_seq": 7} and got.floor == 10 and got.above == {12, 15} and header["partition"] == 3
    assert got.folded(9) and got.folded(12) and not got.folded(11) and not got.folded(16)
    got.advance(13)
    assert got.floor == 13 and got.above == {15}


class _Boom:
    def __reduce__(self):  # unpickling this would run code: it must never be reached for an unauthentic state
        return (pytest.fail, ("unpickled an unauthenticated state",))


def test_state_hmac_refusal():
    key = _key()
    evil = pickle.dumps(_Boom())
    good = seal(key, 1, Watermark(), pickle.dumps({"x": 1}))
    with pytest.raises(StateError, match="HMAC"):
        open_sealed(_key(), 1, good)  # another signing key
    forged = good[:len(MAGIC) + 32] + good[len(MAGIC) + 32:-5] + b"xxxxx"
    with pytest.raises(StateError, match="HMAC"):
        open_sealed(key, 1, forged)  # altered bytes
    with pytest.raises(StateError, match="HMAC"):
        open_sealed(_key(), 1, seal(key, 1, Watermark(), evil))  # a payload sealed with a key we do not hold
    with pytest.raises(StateError, match="magic"):
        open_sealed(key, 1, evil)  # a bare pickle
    with pytest.raises(StateError, match="partition 1's, not 2's"):
        open_sealed(key, 2, good)


def test_cluster_document_checks():
    ok = {"schema": S.CLUSTER_SCHEMA, "partitions": 6, "salt": "0" * 32}
    assert S.check_cluster_doc(json.dumps(ok).encode()) == ok
    for field, value in (("partitions", 0), ("partitions", 257), ("partitions", True), ("salt", "xyz"),
                         ("schema", "other")):
        with pytest.raises(ParameterError, match=f"'{field}' field"):
            S.check_cluster_doc(json.dumps(dict(ok, **{field: value})).encode())
    with pytest.raises(ParameterError, match="'\\(root\\)' field"):
        S.check_cluster_doc(b"[1]")


def test_manager_flags_need_a_shard_id(tmp_path):
    from tailor.cli import main

    assert main(["manager", "--bus", "nats://127.0.0.1:1", "--data", str(tmp_path)]) == 2
    assert main(["manager", "--bus", "nats://127.0.0.1:1", "--shard-id", "a b", "--data", str(tmp_path)]) == 2
    assert main(["manager", "--bus", "nats://127.0.0.1:1", "--shard-id", "a", "--partitions", "300",
                 "--data", str(tmp_path)]) == 2
    # the shard's metrics endpoint: an address, and only with --bus (a manager serves /metrics on --listen)
    assert main(["manager", "--bus", "nats://127.0.0.1:1", "--shard-id", "a", "--metrics-listen", "nowhere",
                 "--data", str(tmp_path)]) == 2
    assert main(["manager", "--metrics-listen", "127.0.0.1:9", "--insecure-dev", "--data", str(tmp_path)]) == 2
    for replicas in ("0", "6"):  # JetStream's replica counts: 1 to 5
        assert main(["manager", "--bus", "nats://127.0.0.1:1", "--shard-id", "a", "--bus-replicas", replicas,
                     "--data", str(tmp_path)]) == 2


def test_unreachable_bus_is_one_clear_error(tmp_path, capsys):
    from tailor.bus.natsd import free_port
    from tailor.cli import main

    assert main(["manager", "--bus", f"nats://127.0.0.1:{free_port()}", "--shard-id", "a", "--data", str(tmp_path)]) == 2
    assert "cannot connect to the bus nats://127.0.0.1:" in capsys.readouterr().err


def test_bus_flags_as_config_keys(tmp_path):
    import argparse

    from tailor.manager.server import add_arguments, with_config_file

    conf = tmp_path / "m.toml"
    conf.write_text('bus = "nats://127.0.0.1:4222"\nshard-id = "s1"\npartitions = 8\nbus-user = "manager"\n'
                    'bus-password-file = "/etc/tailor/bus.pw"\ndata = "/var/lib/tailor"\n')
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = with_config_file(p.parse_args(["--config", str(conf), "--shard-id", "s2"]))
    assert (args.bus, args.shard_id, args.partitions, args.bus_user) == ("nats://127.0.0.1:4222", "s2", 8, "manager")


def test_state_object_names_are_per_partition_and_never_reused():
    from tailor.bus import setup as S

    assert S.state_object(3, 17, 2) == "part.3.17.2" and S.is_state_object(3, "part.3.17.2")
    assert S.is_state_object(3, "part.3")  # written before the leases
    for bad in ("part.31.17.2", "part.3.17", "part.3.x.2", "part.3.17.2.1", "part.4.17.2", "../part.3.1.1"):
        assert not S.is_state_object(3, bad), bad


def test_the_stream_stores_exactly_the_subjects_the_partition_consumers_read():
    """``tailor.tel.*.<p>`` for p < P (docs/bus.md): what ``part-<p>`` filters; anything else under ``tailor.tel.>``
    is refused by the stream (or removed by ``remove_strays`` from a stream created before 2026-12-07)."""
    assert S.stream_subjects(3) == ["tailor.tel.*.0", "tailor.tel.*.1", "tailor.tel.*.2"]
    assert S.stream_config(partitions=3).subjects == S.stream_subjects(3)
    assert [S.consumer_config(p).filter_subject for p in range(3)] == S.stream_subjects(3)
    for subject in ("tailor.tel.default.0", "tailor.tel.pop-1.2", S.tel_subject("x", 2)):
        assert S.is_partition_subject(subject, 3), subject
    for subject in ("tailor.tel.x.3", "tailor.tel.x.99", "tailor.tel.a.b.0", "tailor.tel.x.00", "tailor.tel.x.-1",
                    "tailor.tel.0", "tailor.tel..0", "tailor.tel.x.1a", "other.tel.x.0", "tailor.tel.x.0.y"):
        assert not S.is_partition_subject(subject, 3), subject
    # a partition of a larger, earlier P (the cluster document recreated with fewer partitions): counted as lost
    assert [S.earlier_partition(x, 3) for x in ("tailor.tel.x.3", "tailor.tel.x.99", "tailor.tel.x.255")] == [3, 99, 255]
    for subject in ("tailor.tel.x.2", "tailor.tel.x.256", "tailor.tel.x.03", "tailor.tel.a.b.3", "tailor.tel..3"):
        assert S.earlier_partition(subject, 3) is None, subject


def test_widening_adds_only_subjects_the_stream_does_not_cover():
    assert S._covers("tailor.tel.>", "tailor.tel.*.0") and S._covers("tailor.tel.*.0", "tailor.tel.*.0")
    assert S._covers("tailor.tel.*.0", "tailor.tel.x.0") and not S._covers("tailor.tel.x.0", "tailor.tel.*.0")
    assert not S._covers("tailor.tel.*.0", "tailor.tel.*.1") and not S._covers("tailor.tel.*.0", "tailor.tel.>")
    assert not S._covers("tailor.tel.>", "tailor.tel") and not S._covers("tailor.tel.*", "tailor.tel.*.0")
