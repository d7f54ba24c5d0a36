"""``method="of-wfbp"``: OF-WFBP as fusionopt defines it (Gao et al., Parallel Computing 2023)."""

from __future__ import annotations

import numpy as np

from fusionopt.model._problem import Problem
from fusionopt.solvers.exact._closed_form import closed_form
from fusionopt.solvers._result import Interrupted, Outcome, Result
from fusionopt.solvers._catalogue import method


@method("of-wfbp", family="paper",
        summary="OF-WFBP: closed-form cases, else GradSSA (reconstructed)",
        in_default_comparison=False)
def of_wfbp(
    problem: Problem,
    *,
    population: int = 10,
    iterations: int = 40,
    time_limit: float | None = None,
    rng: int | np.random.Generator | None = None,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
) -> Result:
    """Optimal tensor fusion for WFBP: the closed-form cases, else GradSSA.

    **Reconstructed** (docs/methods.md, section of-wfbp): the paper's abstract says it models the problem,
    solves it mathematically in two cases and uses an improved sparrow search (GradSSA) for
    the others; its full text and code are not public. fusionopt takes the two closed-form
    cases of MODEL.md section 7 as those two cases (:func:`~fusionopt.solvers.exact._closed_form.
    closed_form`: WFBP when every message ends before the next gradient is ready, a single
    message when the backward after the first gradient fits in one startup), and otherwise
    runs :func:`~fusionopt.solvers.searches.gradssa` with the options given. With caps or model
    extensions the closed forms are not used. ``stats["case"]`` is ``"wfbp"``, ``"single"``
    or ``"gradssa"``. Ctrl-C during GradSSA raises :class:`~fusionopt.solvers.Interrupted`
    with the best plan so far, as ``gradssa`` does.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> of_wfbp(Problem(profile, AlphaBeta(1e-4, 1e-10))).stats["case"]
    'wfbp'
    >>> result = of_wfbp(Problem(profile, AlphaBeta(3e-3, 1e-9)), rng=0)
    >>> result.stats["case"], round(result.iteration_time * 1e3, 9)
    ('gradssa', 17.0)
    """
    if max_message_bytes is None and max_messages is None:
        known = closed_form(problem)
        if known is not None:
            return known
    from fusionopt.solvers.searches._ssa import gradssa

    try:
        result = gradssa(problem, population=population, iterations=iterations, time_limit=time_limit, rng=rng,
                         max_message_bytes=max_message_bytes, max_messages=max_messages)
    except Interrupted as stop:
        raise Interrupted(Outcome.handed_on(stop.result, case="gradssa")) from None
    return Outcome.handed_on(result, case="gradssa")
