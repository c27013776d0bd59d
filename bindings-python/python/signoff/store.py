"""The durable pending store and who may approve.

``Gate(store_path="signoff.db")`` keeps pending requests, their deadlines and their states in an
SQLite file (the core's ``SqliteStore``), so they survive a restart. Each state change is committed
before the gate acts on it::

    pending -> approved -> executing -> done
    pending -> denied | timed-out | cancelled
    pending -> approved -> released      (a confirm() caller runs the tool itself)
    approved | executing -> interrupted  (found at start-up: never run again)

After registering tools, call :meth:`signoff.Gate.recover` once, before the first call: requests
still pending wait again until their original deadline and, when approved, the gate runs the
tool's executor itself and stores the result (:meth:`signoff.Gate.record`). Build durable,
remotely approved gates with ``deny_when_unobserved=False``.

:class:`Approvers` decides who may approve which tools:

>>> approvers = Approvers().allow("delete_file", ["alice", "bob"]).allow_all_tools(["admin"])
>>> approvers = approvers.forbid_self_approval()
"""

from __future__ import annotations

from typing import Literal

from ._native import Approvers, NotRestored, Recovery, StoredRecord

#: Where a stored request is in its life.
RecordState = Literal[
    "pending", "approved", "executing", "done", "released", "denied", "timed-out", "cancelled", "interrupted"
]

__all__ = ["Approvers", "NotRestored", "RecordState", "Recovery", "StoredRecord"]
