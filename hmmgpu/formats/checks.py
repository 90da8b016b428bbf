"""Checks of the inputs of a search that hmmsearch makes too, each a one-line HmmgpuError."""
from __future__ import annotations

import numpy as np

from hmmgpu.constants import MAX_TARGET_LENGTH
from hmmgpu.errors import InputError

#: The model lines that ``--cut_ga``, ``--cut_tc`` and ``--cut_nc`` need.
CUTOFF_TAGS = {"gathering": "GA", "trusted": "TC", "noise": "NC"}


def text(value) -> str:
    """A name or description as text (bytes decoded, invalid bytes replaced)."""
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


def check_target_lengths(db) -> None:
    """hmmsearch stops on a target over 100,000 residues: so does hmmgpu, before searching."""
    if db.n and int(db.max_length) > MAX_TARGET_LENGTH:
        i = int(np.argmax(db.lengths))
        raise InputError(
            f"target sequence '{text(db.name(i))}' is {int(db.lengths[i])} residues long, over HMMER's "
            f"comparison pipeline limit of {MAX_TARGET_LENGTH} (hmmsearch refuses it too)")


def check_model(hmm, options) -> None:
    """A protein model, calibrated (STATS lines), with the cutoffs the options ask for."""
    name = text(hmm.name)
    if not hmm.alphabet.is_amino():
        kind = "DNA" if hmm.alphabet.is_dna() else "RNA" if hmm.alphabet.is_rna() else "non-protein"
        raise InputError(f"model '{name}' is a {kind} model; hmmgpu searches protein sequences with "
                          "protein models (use nhmmer for nucleotide searches)")
    if hmm.evalue_parameters.m_lambda is None:
        raise InputError(f"model '{name}' has no E-value calibration (no STATS lines); build it with hmmbuild")
    if options.bit_cutoffs is not None:
        c = hmm.cutoffs
        present = {"gathering": c.gathering_available, "trusted": c.trusted_available,
                   "noise": c.noise_available}[options.bit_cutoffs]
        if not present():
            tag = CUTOFF_TAGS[options.bit_cutoffs]
            raise InputError(f"model '{name}' has no {tag} bit score cutoffs (needed by --cut_{tag.lower()})")
