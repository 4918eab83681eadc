"""What a reader sees of a task's payload: in clear, opened for it, or withheld.

A sealed payload (see :mod:`rdq.keys`) is opened only for a principal whose role may read
payloads, and only when the node holds the key that sealed it; otherwise it is shown as
``encrypted``. A payload in clear is withheld (``hidden``) from a role that may not read
payloads, and so is the raw stored value a corrupt task's ``corrupt`` quotes.

=========================  ===================  ===================  ================
payload as stored          may read payloads,   may read payloads,   may not read
                           node holds the key   node lacks the key   payloads
=========================  ===================  ===================  ================
in clear                   ``clear``            ``clear``            ``hidden``
sealed                     ``decrypted``        ``encrypted``        ``encrypted``
=========================  ===================  ===================  ================
"""

from __future__ import annotations

from typing import Literal

import msgspec

from rdq.errors import PayloadKeyError
from rdq.keys import Keyring, sealed_with, unsealed
from rdq.spi import Envelope

__all__ = ["PayloadState", "shown"]

PayloadState = Literal["clear", "decrypted", "encrypted", "hidden"]
_WITHHELD = "the stored task does not decode (what it holds is shown to roles that read payloads)"


def shown(task: Envelope, may_read: bool, keys: Keyring | None) -> tuple[Envelope, PayloadState]:
    """``task`` as a reader may see it, and what became of its payload (the table above)."""
    sealed = sealed_with(task) is not None
    if not may_read:
        corrupt = _WITHHELD if task.corrupt is not None else None
        withheld = msgspec.structs.replace(task, payload=None, corrupt=corrupt)
        return withheld, "encrypted" if sealed else "hidden"
    if not sealed:
        return task, "clear"
    try:
        return unsealed(task, keys), "decrypted"
    except PayloadKeyError:
        return msgspec.structs.replace(task, payload=None), "encrypted"
