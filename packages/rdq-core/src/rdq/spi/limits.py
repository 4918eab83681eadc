"""The former name of :mod:`rdq.spi.bounds` (the bounds of the contract's inputs), kept so
that a backend written before the rename imports unchanged: ``rdq.spi.limits`` *is* that
module. New code imports ``bounds``."""

import sys
from typing import TYPE_CHECKING

from rdq.spi import bounds

if TYPE_CHECKING:
    from rdq.spi.bounds import *  # noqa: F403

sys.modules[__name__] = bounds
