"""``claim_due``: everything that decides a claim of the MongoDB store, in four parts, and
the extension of a lapsed lease, which takes its slots again as a claim would.

- :mod:`._rounds`: :class:`Claim`, one ``claim_due`` call: the plain findAndModify loop when
  no control record restricts the queue, the same filtered by pauses, rounds of count, peek,
  decide (``rdq.spi.ClaimGate``), take, lease and settle under limits, and for a fair or aged
  queue rounds of count, regroup, read, arrange, decide, take, lease by id and settle (its
  docstring says why this is atomic enough);
- :mod:`._view`: what a claim reads and writes of the queue's control records: the ``View``
  of one read, and the take, settle and expiry updates of the queue's control document;
- :mod:`._order`: the claim order of a fair or aged queue: the due tasks a claim reads
  (each group's first, by the group each task keeps: why that is exact under races),
  arranged with ``rdq.spi.ClaimOrder``, and which of them the controls let through;
- :mod:`._plan`: ``Plan``, what one decision under limits let through and took;
- :mod:`._extension`: ``extend``, ``extend_lease``'s findAndModify, and for a lapsed lease
  under concurrency limits the reservation of its slots (the claims' take, slots only).

The filters and update pipelines a claim sends (``claim_filter``, ``claim_one_filter``,
``Scope``, ``claim_update``: which task a findAndModify picks and how it is leased, with the
``LEASE_EXPIRED`` record of a reclaim) are the store's statements, in
:mod:`rdq_mongo._filters` and :mod:`rdq_mongo._updates`; the stored form of the control
records and the live-lease count in :mod:`rdq_mongo._controls`.
"""

from rdq_mongo._claims._extension import extend
from rdq_mongo._claims._rounds import HOLD_MARGIN_US, Claim

__all__ = ["HOLD_MARGIN_US", "Claim", "extend"]
