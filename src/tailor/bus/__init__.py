"""Scale-out over NATS JetStream (``tailor manager --bus``, ``tailor cluster``): the contract is docs/bus.md.

* :mod:`tailor.bus.partition`: the partition of a client prefix and rendezvous ownership;
* :mod:`tailor.bus.setup`: the stream, buckets, object store and consumers (created when missing), the
  cluster document;
* :mod:`tailor.bus.state`: HMAC-authenticated learned-state objects;
* :mod:`tailor.bus.shard`: one manager shard (heartbeats, ownership, partition workers);
* :mod:`tailor.bus.cluster`: ``tailor cluster``, a loopback nats-server with shards and edges.
"""
