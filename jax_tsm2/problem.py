"""The sizes of a product, shared by routing (which path) and the model (how fast).

It lives apart from both so that ``routing`` can consult ``model`` and
``model`` can name problems without importing each other.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Problem:
    """Sizes of a product with result ``c[batch?, m, n]`` and contraction length ``k``.

    ``batch`` is None when both operands have rank 2. The sizes do not depend
    on the layout (``routing.problem_of`` reads them from the operands by layout).

    Example:
        >>> Problem(None, 1000, 64, 8).empty, Problem(0, 10, 10, 10).empty
        (False, True)
    """

    batch: int | None
    m: int
    k: int
    n: int

    @property
    def empty(self) -> bool:
        return 0 in (self.m, self.k, self.n) or self.batch == 0
