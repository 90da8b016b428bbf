"""The exact merge: parts of one query's search joined into one serial run's result.

What is computed
----------------
The hits of a query searched in parts (tasks over ranges or survivors of a database,
pieces of a file, and later GPUs and cluster shards) are joined into exactly the
``TopHits`` of one serial ``hmmsearch`` over the whole database: the same hits, order,
scores, E-values, domZ, the same set of kept-but-unreported hits, and hmmsearch's pipeline
counters.

Why a split run equals a serial run
-----------------------------------
Each target is scored independently (domain definition reseeds its random generator per
region), so only two things depend on what else was searched:

* **Z.** Without ``-Z``, hmmsearch's Z is the number of targets; the final list is
  thresholded with it after all targets are done (``p7_tophits_Threshold``), and so is
  domZ. The merge sets the parts' target counts so that they sum to the database size.
* **Which hits are kept.** While it searches, HMMER keeps a hit only if
  ``exp(lnP) * Z_running <= E``, where Z_running is the number of targets counted so far,
  i.e. the target's *global* database position + 1. Kept-but-unreported hits matter: they
  set ``len(TopHits)`` and the name-column width of the tables. A part runs with ``Z`` fixed
  to its first position + 1 (a lower bound for all its targets), so it keeps a superset,
  and :func:`drop_unkept` then drops the hits whose ``pvalue * (position + 1) > E``:
  exactly the serial run's set. With ``-T``, bit cutoffs or ``-Z`` the rule does not depend
  on the position at all.

Every part therefore reports positions in the whole database (HMMER's ``shard.h``: an
object's id is its position in the original database, whatever the number of shards);
nothing here knows where a part ran.
"""
from __future__ import annotations

import math
import struct

import numpy as np

#: ``Z_setby`` of a pipeline whose Z is the number of targets (HMMER's ``p7ZSETBY_NTARGETS``).
ZSETBY_NTARGETS = 0
#: Byte offsets in HMMER's serialized ``P7_HIT`` (``p7_hit_Serialize``, network byte order):
#: the hit's ln P-value, and its target name (a NUL-terminated string after the fixed fields).
_LNP_OFFSET = 28
_NAME_OFFSET = 109


def merge_results(hmm, results: list, n: int, residues: int, options, counts=None) -> tuple:
    """One serial run's ``TopHits`` of the model ``hmm`` over ``n`` targets of ``residues`` residues
    (a file's pieces count their own), from its tasks' results (``counts``: hmmgpu's filter
    counters for the targets of the filtered tasks; a range task's own counters are
    HMMER's), and its pipeline counters (None for a whole-database pyhmmer run, whose
    ``TopHits`` hold them)."""
    from pyhmmer.plan7 import TopHits

    if len(results) == 1 and results[0].hits is not None:  # already a serial run's result
        return results[0].hits, None
    if results[0].piece_parts is None:
        states, n, residues = [r.state for r in results], n, residues
        filtered = [r.filtered for r in results]
    else:
        states, n, residues = placed_pieces(results, options.E)
        filtered = [False] * len(states)
    for k, state in enumerate(states):
        pli = state["pipeline"]
        pli["F1"], pli["F2"] = options.F1, options.F2  # the user's, not the filtered tasks' 1.0
        if k:
            pli["nseqs"] = pli["nres"] = 0
        else:
            pli["nseqs"], pli["nres"] = n, residues
        if counts is not None and filtered[k]:  # F1 = F2 = 1 let every target through
            pli["n_past_msv"] = pli["n_past_bias"] = pli["n_past_vit"] = 0
    if counts is not None:
        first = states[0]["pipeline"]
        first["n_past_msv"] += counts.n_past_msv
        first["n_past_bias"] += counts.n_past_bias
        first["n_past_vit"] += counts.n_past_vit
    for state in states:
        pli = state["pipeline"]
        if options.Z is None:
            pli["Z_setby"] = ZSETBY_NTARGETS
            pli["Z"] = float(pli["nseqs"])
    counters = {key: sum(state["pipeline"][key] for state in states)
                for key in ("nseqs", "nres", "n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd")}
    parts = []
    for state in states:
        part = TopHits(hmm)
        part.__setstate__(state)
        parts.append(part)
    return parts[0].merge(*parts[1:]), counters


def placed_pieces(results: list, E: float) -> tuple:
    """The states of a file's pieces (:meth:`~hmmgpu.cpu.pyhmmer_stage.PyhmmerStage.run`), each hit that HMMER
    would not have kept at its target's position dropped, and the file's targets and residues."""
    states, start, residues = [], 0, 0
    for result in results:
        for state, placed in result.piece_parts:
            if placed:
                drop_unkept(state, lambda name, placed=placed, start=start: start + placed[name]
                             if name in placed else None, E)
            states.append(state)
        start += sum(state["pipeline"]["nseqs"] for state, _ in result.piece_parts)
        residues += sum(state["pipeline"]["nres"] for state, _ in result.piece_parts)
    return states, start, residues


def positions_by_name(names) -> dict:
    """Each name's position in the iterable ``names``: an int, or for a name that occurs more
    than once the list of its positions, ascending."""
    where: dict = {}
    for p, name in enumerate(names):
        at = where.setdefault(name, p)
        if isinstance(at, list):
            at.append(p)
        elif at != p:
            where[name] = [at, p]
    return where


def hit_fields(serialized) -> tuple:
    """(lnP, target name as bytes) of one serialized hit of a ``TopHits`` state."""
    raw = bytes(serialized)
    lnp = struct.unpack_from(">d", raw, _LNP_OFFSET)[0]
    return lnp, raw[_NAME_OFFSET:raw.index(0, _NAME_OFFSET)]


def position_in(where, positions: np.ndarray) -> int:
    """The database position of a hit's target among a task's ``positions`` (ascending), from
    its name's entry in :meth:`~hmmgpu.cpu.pyhmmer_stage.SequenceCache.names`: the position itself, or for a name that
    occurs more than once (in other tasks: never twice in one) the one of its positions here."""
    if not isinstance(where, np.ndarray):
        return where
    inside = positions[np.minimum(np.searchsorted(positions, where), positions.size - 1)] == where
    return int(where[inside][0])


def drop_unkept(state: dict, position_of, E: float, bound: int | None = None) -> None:
    """Remove from ``state`` the hits a serial run would not have kept (running Z).

    HMMER keeps a hit when ``exp(lnP) * Z <= E`` with Z the number of targets counted so
    far (``p7_pli_TargetReportable``): the hit's database position + 1. ``position_of(name)``:
    the position of a hit's target (None: keep it); it is asked only about hits that ``bound``
    (no target's position + 1 is larger) does not already keep.
    """
    keep = []
    for i, entry in enumerate(state["unsrt"]):
        lnp, name = hit_fields(entry)
        if bound is not None and math.exp(lnp) * float(bound) <= E:
            keep.append(i)
            continue
        p = position_of(name)
        if p is None or math.exp(lnp) * float(p + 1) <= E:
            keep.append(i)
    if len(keep) == len(state["unsrt"]):
        return
    new_index = {old: new for new, old in enumerate(keep)}
    state["unsrt"] = [state["unsrt"][i] for i in keep]
    state["hit"] = [new_index[o] for o in state["hit"] if o in new_index]
    state["N"] = state["Nalloc"] = len(keep)
