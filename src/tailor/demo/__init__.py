"""``tailor demo``: the closed loop with real edges in namespaces, and helpers the fault tests share."""
