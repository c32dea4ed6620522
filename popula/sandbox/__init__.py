"""The sandbox: validate tasks, compute their outputs, judge answers, safely and fast.

    from popula.sandbox import Sandbox, Limits
    with Sandbox(workers=2, limits=Limits()) as sb:
        results = sb.verify(records)      # list[VerifyResult], same order as records

See pool.py for the design, zygote.py for the jail, rules.py for the policy and
values.py for how values are read back and compared.
"""

from popula.sandbox.limits import Limits
from popula.sandbox.pool import Sandbox, SandboxError, SandboxUnavailable
from popula.sandbox.protocol import SandboxPool
from popula.sandbox.values import NotAValue, read_value, reprs_equal, values_equal

__all__ = ["Limits", "NotAValue", "Sandbox", "SandboxError", "SandboxPool", "SandboxUnavailable", "read_value", "reprs_equal", "values_equal"]
