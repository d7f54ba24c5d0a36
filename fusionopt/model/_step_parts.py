"""Where a profile's step parts run under each pattern (MODEL.md section 4.1): :func:`fit_step_parts`.

A profile traced from a DDP job carries three parts of the step that belong to no tensor:
``update_lump`` (the optimiser over every tensor at once), ``post_backward`` (DDP's copies of
the reduced buckets into ``.grad``) and ``host_overhead``. Barrier all-reduce and the
parameter server under barrier sync run each where the job ran it. The other steps have no
place for some of them, and fitting the profile to the step means:

* **fully sharded** (section 8.2): the optimiser runs once after the backward, so the lump
  stays; the step runs no DDP copies, so ``post_backward`` is dropped;
* **decoupled** (section 8.1): each shard is updated after its own reduce-scatter, so the
  lump is spread over the tensors' updates in proportion to their bytes; no DDP copies run,
  so ``post_backward`` is dropped;
* **layerwise sync** (section 4, all-reduce or parameter server): each tensor is updated as
  soon as its gradient is reduced, so the lump is spread as above, and so is
  ``post_backward``: the copy of each reduced tensor out of its message comes after its own
  reduction, before its update.

``host_overhead`` stays under every pattern: each step ends with the host's share.
"""

from __future__ import annotations

from fusionopt.model._pattern import STEPS
from fusionopt.model._profile import Profile

SYNC_MODES = ("barrier", "layerwise")
# What each step does with a part it has no place for (MODEL.md section 4.1).
_DROPPED_BY = {"fully-sharded": "a fully sharded step", "decoupled": "a decoupled all-reduce"}


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.6g} ms"


def fit_step_parts(profile: Profile, *, pattern: str, sync: str) -> tuple[Profile, tuple[str, ...]]:
    """``(fitted, notes)``: ``profile`` with its step parts fitted to the step of ``pattern``
    (``"all-reduce"``, ``"ps"``, ``"decoupled"`` or ``"fully-sharded"``, as
    :attr:`~fusionopt.model.Problem.pattern` names them) under ``sync``, and one line
    per change saying what was done (none when the profile fits as it is).

    >>> p = Profile.from_arrays([3e6, 1e6], [0.0, 0.0], [1e-3, 1e-3], name="job",
    ...                         update_lump=4e-3, post_backward=1e-3)
    >>> fitted, notes = fit_step_parts(p, pattern="decoupled", sync="barrier")
    >>> fitted.update.round(9).tolist(), fitted.W
    ([0.003, 0.001], 0.0)
    >>> print(notes[0])
    profile 'job': post_backward (1 ms of DDP's copies into .grad) dropped: a decoupled all-reduce does not run them
    >>> fit_step_parts(p, pattern="all-reduce", sync="barrier")[1]
    ()
    """
    for name, value, known in (("pattern", pattern, STEPS), ("sync", sync, SYNC_MODES)):
        if value not in known:
            raise ValueError(f"{name} must be one of {', '.join(map(repr, known))}, got {value!r}")
    label = f"profile {profile.name!r}" if profile.name else "profile"
    notes = []
    spread = []
    if pattern in _DROPPED_BY:
        if profile.post_backward:
            notes.append(f"{label}: post_backward ({_ms(profile.post_backward)} of DDP's copies into .grad) "
                         f"dropped: {_DROPPED_BY[pattern]} does not run them")
            profile = profile.with_step_parts(post_backward=0.0)
        if pattern == "decoupled" and profile.update_lump:
            spread.append("update_lump")
            why = "each shard is updated after its reduce-scatter"
    elif sync == "layerwise":
        spread = [part for part in ("update_lump", "post_backward") if getattr(profile, part)]
        why = "under layerwise sync each tensor is updated once its own gradient is reduced"
    if spread:
        moved = " and ".join(f"{part} ({_ms(getattr(profile, part))})" for part in spread)
        notes.append(f"{label}: {moved} spread over the tensors' update times in proportion to their bytes: {why}")
        profile = profile.spread_step_parts(*spread)
    return profile, tuple(notes)
