"""Exceptions. Every error signoff raises is a :class:`SignoffError`; its ``kind`` is the core's
stable error kind string, and each kind has its own subclass (generated in the native module from
the core's ``ErrorKind::ALL``, so the two cannot drift apart). :class:`IoError` (a file could not be
read or written, e.g. the audit log) is an ``OSError`` as well, with ``errno`` set when the
operating system gave one.

>>> from signoff.errors import error_class, AlreadyResolvedError
>>> error_class("already_resolved") is AlreadyResolvedError
True
>>> from signoff.errors import IoError, SignoffError
>>> issubclass(IoError, SignoffError) and issubclass(IoError, OSError)
True
"""

from __future__ import annotations

from typing import Dict, Literal, Type

from ._native import (
    ERROR_KINDS,
    SignoffError,
    # @generated begin error-imports (core/tests/sourcegen.rs, one per core `ErrorKind`)
    AlreadyResolvedError,
    AlreadyUsedError,
    BadSignatureError,
    ClosedError,
    ConfigError,
    EditsNotAllowedError,
    ExpiredError,
    InvalidArgumentsError,
    InvalidToolError,
    IoError,
    MalformedError,
    MismatchError,
    NoExecutorError,
    NotPendingError,
    StoreError,
    TokenExpiredError,
    UnauthorizedError,
    UnknownKeyError,
    UnknownRequestError,
    UnknownToolError,
    WrongApproverError,
    # @generated end error-imports
)
from . import _native

#: The core's stable error kinds.
ErrorKind = Literal[
    # @generated begin error-kinds (core/tests/sourcegen.rs, the core's `ErrorKind` names)
    "unknown_tool",
    "invalid_tool",
    "invalid_arguments",
    "unknown_request",
    "already_resolved",
    "expired",
    "edits_not_allowed",
    "mismatch",
    "malformed",
    "unauthorized",
    "closed",
    "store",
    "no_executor",
    "bad_signature",
    "unknown_key",
    "token_expired",
    "wrong_approver",
    "already_used",
    "not_pending",
    "config",
    "io",
    # @generated end error-kinds
]


def _class_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_")) + "Error"


#: kind string -> exception class, built from the native module's list of kinds.
ERROR_CLASSES: Dict[str, Type[SignoffError]] = {k: getattr(_native, _class_name(k)) for k in ERROR_KINDS}


def error_class(kind: str) -> Type[SignoffError]:
    """The exception class for a core error kind (``KeyError`` for an unknown kind)."""
    return ERROR_CLASSES[kind]


__all__ = [
    "ERROR_CLASSES",
    "ERROR_KINDS",
    "ErrorKind",
    "SignoffError",
    "error_class",
    # @generated begin error-names (core/tests/sourcegen.rs, one per core `ErrorKind`)
    "AlreadyResolvedError",
    "AlreadyUsedError",
    "BadSignatureError",
    "ClosedError",
    "ConfigError",
    "EditsNotAllowedError",
    "ExpiredError",
    "InvalidArgumentsError",
    "InvalidToolError",
    "IoError",
    "MalformedError",
    "MismatchError",
    "NoExecutorError",
    "NotPendingError",
    "StoreError",
    "TokenExpiredError",
    "UnauthorizedError",
    "UnknownKeyError",
    "UnknownRequestError",
    "UnknownToolError",
    "WrongApproverError",
    # @generated end error-names
]
