"""Policies: every learner and baseline behind one select/observe/plan interface."""

from tailor.policies.base import (POLICIES, Context, Decision, Outcome, Policy, PolicyEnv, PrefixHistory,
                                  make_policy, register)

__all__ = ["POLICIES", "Context", "Decision", "Outcome", "Policy", "PolicyEnv", "PrefixHistory", "make_policy",
           "register"]

# register the built-in policies
from tailor.policies import baselines, bo  # noqa: E402,F401
