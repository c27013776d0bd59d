"""Events on the gate's bus, as typed immutable objects with the core's stable JSON form.

Every event has ``type``, ``request_id``, ``to_dict()``, ``to_json()`` and a ``from_json()``
static method; :func:`parse_event` parses any of them.

>>> e = parse_event('{"type": "confirmation-timeout", "id": "6f1c7a2e-4a7e-4c55-8f0e-1d2b3c4d5e6f",'
...                 ' "tool": "delete_file", "session_id": "s", "deadline_ms": 5, "at_ms": 6}')
>>> type(e).__name__, e.tool
('ConfirmationTimeout', 'delete_file')
>>> parse_event(e.to_json()) == e
True
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Union

from ._native import (
    ConfirmationRequest,
    ConfirmationResolved,
    ConfirmationResponse,
    ConfirmationTimeout,
    EventStream,
    Lagged,
    PendingRequest,
)
from ._native import parse_event_json as _parse_event_json

#: An event's ``type`` tag, as :meth:`signoff.Gate.events` takes it in ``types``.
EventType = Literal["confirmation-request", "confirmation-response", "confirmation-timeout", "confirmation-resolved"]

#: Any event on the bus.
Event = Union[ConfirmationRequest, ConfirmationResponse, ConfirmationTimeout, ConfirmationResolved]

#: What an event stream yields: an event, or a :class:`Lagged` marker (with the pending snapshot)
#: when the stream fell behind.
StreamItem = Union[ConfirmationRequest, ConfirmationResponse, ConfirmationTimeout, ConfirmationResolved, Lagged]


def parse_event(data: Union[str, bytes, Mapping[str, Any]]) -> Event:
    """Parses an event's stable JSON form (text or dict) into its class.

    Raises :class:`signoff.MalformedError` when it is not a valid event.
    """
    return _parse_event_json(data)


__all__ = [
    "ConfirmationRequest",
    "ConfirmationResolved",
    "ConfirmationResponse",
    "ConfirmationTimeout",
    "Event",
    "EventStream",
    "Lagged",
    "PendingRequest",
    "StreamItem",
    "parse_event",
]
