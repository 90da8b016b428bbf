"""The stage interface: what a device must offer for the search to run on it.

HMMER's ``p7_Pipeline`` and ``p7_domaindef.c`` reach the vector code only through a dozen
stage functions declared once (``impl_sse.h``); every implementation (SSE, NEON, and here
the GPU) provides the same set. hmmgpu's search is organised the same way, in two parts:

* **Filter stages** (:class:`CascadeBackend`, :class:`FilterBackend`): MSV, the bias
  filter and the Viterbi filter over one database, model after model, and where the
  backend has a Forward parser, the Forward filter (F3) as a gate on their survivors.
  ``prepare`` turns an HMM into what ``submit`` takes, ``submit`` returns a ticket whose
  ``result()`` is the model's :class:`~hmmgpu.stages.cascade.CascadeResult` (its survivors
  and counters).
  Implementations: the exact CPU filters (:class:`~hmmgpu.cpu.backends.NumbaBackend`), the
  GPU in this process (:class:`~hmmgpu.gpu.backend.CudaBackend`) or in a child process
  (:class:`~hmmgpu.gpu.process.CudaProcessBackend`). :class:`~hmmgpu.cpu.backends.HmmerBackend`
  runs no filter of hmmgpu's: pyhmmer's pipeline does everything.
* **Post-filter stage** (:class:`PostFilterStage`): Forward, Backward and domain
  definition on the filters' survivors, as tasks planned by :mod:`hmmgpu.stages.postfilter`
  and merged exactly by :mod:`hmmgpu.stages.merge`. The first implementation is pyhmmer's
  own pipeline (:class:`~hmmgpu.cpu.pyhmmer_stage.PyhmmerStage`); the second, hmmgpu's own
  code (:class:`~hmmgpu.cpu.own_postfilter.OwnPostFilter`, ``--postfilter hmmgpu``).

The engine (:mod:`hmmgpu.search.engine`) chooses what to do by type
(``isinstance(backend, CascadeBackend)``); nothing here knows about routing, processes or
devices.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI starts the GPU process before importing it
    import numpy as np

    from hmmgpu.stages.cascade import CascadeResult, ForwardResult, MsvResult, ViterbiResult


class Backend(ABC):
    """Where the filter stages of a search run."""

    #: One line naming the backend, printed by the command line.
    description: str = ""
    #: Whether a cascade backend's results come back in the order the models were submitted. A
    #: backend whose results come in any order (the GPU process) gives tickets an ``answered()``
    #: that does not wait, and :meth:`receive`.
    answers_in_order = True

    def receive(self, timeout: float) -> None:
        """Take the results that have come back, waiting up to ``timeout`` seconds for the first
        (a backend whose answers come in any order)."""
        raise NotImplementedError

    def prepare_for(self, lengths) -> None:
        """Get ready for models of these lengths (the GPU compiles their kernels up front)."""

    def set_float_mode(self, ftz: bool) -> None:
        """The search computes its post-filter in hmmsearch's float mode (``ftz``, flush-to-zero)
        or in IEEE arithmetic: a backend that does some of that stage's work (the GPU's domain
        definitions) does it in that mode alone. The engine says it before the first model."""

    def details(self) -> dict:
        """Where the backend's time went (for the end-of-run statistics)."""
        return {}

    def close(self, wait: bool = True) -> None:
        """Release what the backend holds (GPU memory). ``wait=False``: a helper process is told
        to stop and left to finish on its own (a command about to end need not wait for its
        CUDA context to be torn down)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class CascadeBackend(Backend):
    """hmmgpu's own filter cascade over one database, model after model."""

    def __init__(self, db):
        self.db = db

    @abstractmethod
    def prepare(self, hmm, mmu: float | None = None):
        """What :meth:`submit` takes for this model (``mmu``: its MSV location parameter, when
        the caller read it from the file)."""

    @abstractmethod
    def submit(self, model, options):
        """Start the cascade of one model; the returned ticket's ``result()`` gives its
        :class:`~hmmgpu.stages.cascade.CascadeResult`."""

    def ready(self, timeout: float | None = None) -> bool:
        """Whether models can be submitted now: a backend that starts in the background (the
        GPU process) is waited for up to ``timeout`` seconds (None: until it is), and raises
        its one-line error if it could not start."""
        return True

    def waiting(self) -> int:
        """Models submitted whose results have not come back yet (a backend that runs each
        model as it is submitted, or blocks when it is full, has none waiting)."""
        return 0

    def gpu_seconds(self) -> float:
        """Kernel time spent on the GPU so far."""
        return 0.0


class FilterBackend(CascadeBackend):
    """hmmgpu's own filter stages (MSV, bias, Viterbi filter) in this process."""

    def prepare(self, hmm, mmu: float | None = None):
        """The model's quantized filter tables (:class:`~hmmgpu.stages.profiles.ModelProfile`)."""
        from hmmgpu.stages.profiles import ModelProfile

        return ModelProfile.from_hmm(hmm, mmu=mmu)

    @abstractmethod
    def msv(self, profile, thresholds=None) -> "MsvResult":
        """MSV of every target; only those with status RANGE or ``xJ >= thresholds[L]`` (all
        non-empty targets when ``thresholds`` is None)."""

    @abstractmethod
    def bias(self, profile, indices) -> np.ndarray:
        """Composition-bias filter scores (nats, float32) of the targets ``indices``."""

    @abstractmethod
    def viterbi(self, profile, indices) -> "ViterbiResult":
        """Viterbi filter of the targets ``indices``."""

    def forward(self, profile, indices, fallback: bool = False) -> "ForwardResult | None":
        """The Forward parser (``p7_ForwardParser``) of the targets ``indices``, or None where
        the backend has none (then the cascade runs no Forward gate). Scores come back only
        where they are libhmmer's bit for bit in either float mode; the others get
        ``STATUS_UNSURE``, unless ``fallback`` asks libhmmer to compute them (in the calling
        thread's float mode)."""
        return None

    def backward(self, profile, indices, fallback: bool = False) -> "ForwardResult | None":
        """The Backward parser (``p7_BackwardParser``, after the Forward parser on the same
        target, as ``p7_Pipeline`` runs it on an F3 passer) of the targets ``indices``: its
        status and score in a :class:`~hmmgpu.stages.cascade.ForwardResult`, or None where the
        backend has none. As :meth:`forward`: scores only where they are libhmmer's bit for bit
        in either float mode, the others ``STATUS_UNSURE`` or, with ``fallback``, libhmmer's."""
        return None

    def cascade(self, profile, options) -> "CascadeResult":
        """The filter cascade of one model over every target."""
        from hmmgpu.stages.cascade import run_cascade

        return run_cascade(self, profile, options, self.db)

    def submit(self, profile, options):
        """Start the cascade of one model (here it runs at once; the CUDA backend queues it
        on the GPU and returns)."""
        return _Finished(self.cascade(profile, options))


class _Finished:
    """A ticket whose result is already known."""

    def __init__(self, result):
        self._result = result

    def result(self):
        return self._result


class PostFilterStage(ABC):
    """Forward, Backward and domain definition of one database's filter survivors, as tasks.

    ``plan`` cuts a query's survivors (or, on pyhmmer's route, every target) into tasks of
    about equal work; ``run`` computes one task's hits and counters; ``merge`` joins a
    query's task results into exactly one serial run's ``TopHits`` and counters."""

    @abstractmethod
    def plan(self, query, positions=None) -> list:
        """The tasks of ``query`` (its survivors' database ``positions``, or every target)."""

    @abstractmethod
    def run(self, task, alone: bool = False):
        """One task's :class:`~hmmgpu.stages.postfilter.TaskResult` (``alone``: the query's only task)."""

    @abstractmethod
    def merge(self, query, results: list, counts=None) -> tuple:
        """(``TopHits`` of one serial run, its pipeline counters) from the query's task results."""

    def passers_to_define(self, task):
        """The F3 passers of a queued ``task`` that the GPU process may decode and define once
        the filters are done (sorted database positions; the task then runs with those answers,
        ``task.device_answers``), or None where this stage would not use them."""
        return None

    def details(self) -> dict:
        """What the stage did, for the end-of-run statistics (targets by route, seconds)."""
        return {}

    def close(self, now: bool = False) -> None:
        """Release what the stage holds once the search is over (worker processes; ``now``:
        the search failed or was stopped, nothing is waited for)."""
