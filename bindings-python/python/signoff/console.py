"""The browser approval console: a person signs in and approves from a web page, live.

:meth:`signoff.Gate.serve_console` starts it on its own thread (the Rust crate
``signoff-console``) and returns a :class:`Console`. The page lists every pending request as it
arrives (Server-Sent Events), with the tool, why approval was asked and the arguments exactly as
they will run, and lets a signed-in person approve once, approve for the session, edit the
arguments (checked against the tool's schema, with a diff) or deny with a reason. Decided
requests and the verified audit chain are one click away.

People sign in with a single-use link (:meth:`Console.sign_in_link`, signed with the gate's
``token_keys``; the token is in the URL fragment, which browsers never send to a server) or with a
name and key (``approver_keys=`` / ``approver_keys_file=``). The console never decides who may
approve: each decision is submitted as a signed approval token issued to the signed-in person,
and the gate's ``approvers`` accept or refuse it.

The console counts as an approver on the gate's bus (it can answer), so while it runs, gated
calls wait for a person until their deadline.

It binds to loopback (``127.0.0.1``, a free port) unless told otherwise::

    gate = signoff.Gate(token_keys=signoff.TokenKeys("k1", signoff.Secret.generate()))
    with gate.serve_console() as console:
        print("open", console.sign_in_link("alice"))
        ...  # run the agent; a person approves in the browser
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

from . import _native
from ._closing import Closing

if TYPE_CHECKING:
    from .gate import Gate


class Console(Closing):
    """A running approval console (see :mod:`signoff.console`). Made by
    :meth:`signoff.Gate.serve_console`.

    :meth:`close` (or leaving a ``with`` block, or garbage collection) stops the server: open
    pages' event streams end and the port is released. Pending requests are not touched (they
    stay pending for other approvers, or time out). The console keeps its gate alive.
    """

    __slots__ = ("_native", "_gate")

    def __init__(self, native: _native.Console, gate: "Gate") -> None:
        self._native = native
        # A gate that is garbage-collected closes, cancelling what is pending: the console keeps
        # the gate it serves alive.
        self._gate = gate

    @property
    def url(self) -> str:
        """The console's address, ending in ``/``, e.g. ``http://127.0.0.1:49152/`` (or the
        ``public_origin``)."""
        return self._native.url

    @property
    def address(self) -> Tuple[str, int]:
        """The address it listens on: ``(host, port)``."""
        return self._native.address

    @property
    def gate(self) -> "Gate":
        """The gate it serves."""
        return self._gate

    def sign_in_link(self, approver: str) -> str:
        """A single-use sign-in link for ``approver``, valid for the console's ``sign_in_ttl``:
        ``{url}login#token=...``. Send it to that person only (it signs them in). The token is in
        the URL fragment, which browsers never send to a server, so it does not end up in access
        logs; the page removes it from the address bar once it has signed in.

        Raises :class:`MalformedError` for an empty approver.
        """
        return self._native.sign_in_link(approver)

    def close(self) -> None:
        """Stops the server and releases the port (waits for its thread, without holding the
        GIL). Idempotent."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._native.closed

    def __repr__(self) -> str:
        return f"Console(url={self.url!r}, closed={self.closed})"


__all__ = ["Console"]
