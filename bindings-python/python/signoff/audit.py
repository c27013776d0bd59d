"""The audit trail: ``Gate(audit_path=...)`` appends a hash-chained JSON Lines log (each record
carries ``seq``, the previous record's hash and its own), optionally rotated
(``audit_rotate_bytes``: the file becomes ``<path>.1``, ``<path>.2``, ... and a new file continues
the chain). :func:`verify_audit_chain` checks the whole chain and reports the first edited,
missing, reordered or malformed record.

>>> import os, tempfile, signoff
>>> path = os.path.join(tempfile.mkdtemp(), "audit.jsonl")
>>> with signoff.Gate(audit_path=path) as gate:
...     gate.register("delete_file", approval="required")
...     gate.confirm_blocking("delete_file", {"path": "/tmp/x"}).outcome
...     gate.flush_audit()
'cancelled'
>>> report = verify_audit_chain(path)
>>> report.intact, report.records > 0, report.problem
(True, True, None)
"""

from __future__ import annotations

from typing import Literal

from ._native import ChainProblem, ChainReport, verify_audit_chain

#: What :func:`verify_audit_chain` found wrong first.
ChainProblemKind = Literal["edited", "missing", "reordered", "malformed"]

__all__ = ["ChainProblem", "ChainProblemKind", "ChainReport", "verify_audit_chain"]
