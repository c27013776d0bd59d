"""Signed approval tokens: an approval link for a UI that lives elsewhere (a browser tab, a phone,
a chat channel).

The pending call stays in the gate. :meth:`signoff.Gate.issue_token` signs a token that names one
request and binds it (tool, argument digest, session, the one approver it is for, expiry);
:meth:`signoff.Gate.respond_token` verifies it and answers the request, once. Signing and every
check are the core's (HMAC-SHA256, constant-time comparison); each failure has its own exception:
:class:`~signoff.BadSignatureError`, :class:`~signoff.UnknownKeyError`,
:class:`~signoff.TokenExpiredError`, :class:`~signoff.WrongApproverError`,
:class:`~signoff.AlreadyUsedError`, :class:`~signoff.NotPendingError`.

Keys have ids, so they can be rotated: the current key signs, older keys keep verifying. A secret
is never shown:

>>> keys = TokenKeys("k1", Secret.generate()).rotate("k2", Secret.generate())
>>> keys.current_key_id, keys.key_ids
('k2', ['k2', 'k1'])
>>> repr(keys)
"TokenKeys(key_ids=['k2', 'k1'], secrets=<redacted>)"
>>> repr(Secret(bytes(32)))
'Secret(<32 bytes, redacted>)'

In production, load the keys from configuration (:meth:`TokenKeys.from_env`,
:meth:`TokenKeys.from_file`, :meth:`TokenKeys.parse`: ``key_id:base64secret`` entries, current key
first) so tokens stay valid across a restart.
"""

from __future__ import annotations

from typing import Optional, TypedDict

from ._native import Secret, TokenClaims, TokenKeys

__all__ = ["MarkerClaims", "Secret", "TokenClaims", "TokenKeys"]


class MarkerClaims(TypedDict):
    """What an accepted approval marker says (:meth:`signoff.Gate.accept_approval_marker`)."""

    nonce: str
    #: The request a person answered; ``None`` for a call a session grant covered.
    request_id: Optional[str]
    #: The tool, by the name the receiving gate knows it.
    tool: str
    #: ``sha256:<hex>`` of the canonical JSON of the approved arguments.
    arguments_digest: str
    #: Who approved.
    approver: str
    issued_at_ms: int
    expires_at_ms: int
    key_id: str
