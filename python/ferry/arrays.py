"""NumPy arrays over ferry's regions, without copying.

:func:`ndarray` views a :class:`ferry.Region` (writable: this process fills
it before sending) or a :class:`ferry.MappedRegion` (read-only: a region
received by value) as an array. The array's ``base`` is a ``memoryview`` of
the region, which holds a buffer export: the region cannot be unmapped
(``close()`` raises ``BufferError``) while any array over it is alive, and it
stays mapped after the message it came in is gone.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence, cast

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    from typing_extensions import Buffer

    from ._ferry import MappedRegion, Region


def ndarray(region: "Region | MappedRegion", dtype: Any = "u1", shape: "int | Sequence[int] | None" = None, *, offset: int = 0) -> "np.ndarray":
    """An array of ``dtype`` and ``shape`` (default: as many elements as fit)
    over ``region``'s memory, starting ``offset`` bytes in. No byte is
    copied. Over a received region the array is read-only: writing to it
    raises ``ValueError``."""
    import numpy as np

    dt = np.dtype(dtype)
    view = memoryview(cast("Buffer", region))  # both export the buffer protocol
    if shape is None:
        count = (view.nbytes - offset) // dt.itemsize
        shape = (count,)
    elif isinstance(shape, int):
        shape = (shape,)
    count = math.prod(shape)
    if offset < 0 or offset + count * dt.itemsize > view.nbytes:
        raise ValueError(f"{count} elements of {dt} at offset {offset} do not fit in {view.nbytes} bytes")
    # frombuffer keeps the memoryview (and so a counted view) as the base.
    return np.frombuffer(view, dtype=dt, count=count, offset=offset).reshape(shape)
