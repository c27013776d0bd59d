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

A chain cut after any record is still a valid chain, so the log alone cannot show records
removed from its end. A gate with both ``store_path`` and ``audit_path`` therefore keeps the
chain's head in its SQLite store as well; ``verify_audit_chain(path, store_path=db)`` checks the
log against it and reports a cut end as ``truncated`` (and a replaced last record as
``edited``). Verify after the gate has closed: a running gate holds its database locked
(:class:`~signoff.StoreError`).

>>> workdir = tempfile.mkdtemp()
>>> log, db = os.path.join(workdir, "audit.jsonl"), os.path.join(workdir, "signoff.db")
>>> with signoff.Gate(audit_path=log, store_path=db) as gate:
...     gate.register("delete_file", approval="required")
...     gate.confirm_blocking("delete_file", {"path": "/tmp/x"}).outcome
'cancelled'
>>> verify_audit_chain(log, store_path=db).intact
True
>>> with open(log) as f:
...     lines = f.readlines()
>>> with open(log, "w") as f:
...     f.writelines(lines[:-1])  # cut the last record
>>> verify_audit_chain(log).intact  # the chain alone cannot tell
True
>>> verify_audit_chain(log, store_path=db).problem.kind
'truncated'
"""

from __future__ import annotations

from typing import Literal

from ._native import ChainProblem, ChainReport, verify_audit_chain

#: What :func:`verify_audit_chain` found wrong first (``"truncated"`` only with ``store_path=``:
#: the log ends before the head the store anchored).
ChainProblemKind = Literal["edited", "missing", "reordered", "malformed", "truncated"]

__all__ = ["ChainProblem", "ChainProblemKind", "ChainReport", "verify_audit_chain"]
