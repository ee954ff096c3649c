"""Policies: every learner and baseline behind one select/observe/plan interface.

Every module of this package is imported here, so a policy registers itself (``@register``) by
merely living in ``tailor/policies/``.
"""

import importlib
import pkgutil

from tailor.policies.base import (POLICIES, Context, Decision, Outcome, Policy, PolicyEnv, PrefixHistory,
                                  make_policy, register)

__all__ = ["POLICIES", "Context", "Decision", "Outcome", "Policy", "PolicyEnv", "PrefixHistory", "make_policy",
           "register"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
