"""The seed papers' schedulers, as their papers or code run them: MG-WFBP, OF-WFBP, P3,
ByteScheduler, iBatch and iPart, US-Byte and DeAR."""

from fusionopt.solvers.papers._bytescheduler import bytescheduler, bytescheduler_slices, bytescheduler_tuned
from fusionopt.solvers.papers._dear import dear_groups
from fusionopt.solvers.papers._ipart import (
    NEXT_TENSOR, IPartCuts, IPartGates, IPartStream, ibatch, ipart, ipart_cuts, ipart_lookaheads, ipart_pull_greedy,
    ipart_push_greedy,
)
from fusionopt.solvers.papers._mgwfbp import plain_merges, simulated_merges
from fusionopt.solvers.papers._priority import p3, p3_slices
from fusionopt.solvers.papers._usbyte import DEFAULT_UNIT_PARAMETERS, dispatch, usbyte

__all__ = [
    "DEFAULT_UNIT_PARAMETERS", "IPartCuts", "IPartGates", "IPartStream", "NEXT_TENSOR", "bytescheduler",
    "bytescheduler_slices", "bytescheduler_tuned", "dear_groups", "dispatch", "ibatch", "ipart", "ipart_cuts",
    "ipart_lookaheads", "ipart_pull_greedy", "ipart_push_greedy", "p3", "p3_slices", "plain_merges",
    "simulated_merges", "usbyte",
]
