"""clusterbench's SimCLR step against the bare loop with the same model, optimiser and schedule,
counted rather than timed (a timed unit test measures the machine): on a GPU fast enough that the
host sets the pace, a step costs what it issues, so the device operations a step issues are the
CPU-checkable proxy of the 0.9x samples/s target, and the tensors a step leaves alive that of the
1.3x peak-memory target (benchmarks/perf/train_throughput.py times both on a GPU)."""

from __future__ import annotations

import gc
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from benchmarks.perf.train_throughput import BareLoop, Case, LightningPipeline

#: The targets of the throughput benchmark, as counts: operations per step at most 1/0.9 of the
#: bare loop's, bytes left alive by the steps at most 1.3 times the bare loop's.
TARGET_RATE, TARGET_MEMORY = 0.9, 1.3


def pointer(tensor: torch.Tensor) -> int | None:
    """Where a tensor's storage lies; None for one without data (a fake tensor that another
    test's compilation left behind)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(tensor, FakeTensor):  # asked for its pointer, it warns (and will raise)
        return None
    try:
        return tensor.untyped_storage().data_ptr()
    except RuntimeError:
        return None


class Issued(TorchDispatchMode):
    """Counts the operations issued and keeps a weak reference to every tensor they return."""

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.made = 0, []
        gc.collect()
        #: storages alive before the counted steps (the data, the weights, the optimiser's
        #: state): an operation that returns a view of one made nothing new
        self.before = {pointer(t) for t in gc.get_objects() if issubclass(type(t), torch.Tensor)}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self.made.append(weakref.ref(value))
        return out

    def alive_bytes(self) -> int:
        """Bytes of the tensors made under the counter that are still alive (each storage once)."""
        gc.collect()
        storages = {}
        for ref in self.made:
            tensor = ref()
            if tensor is not None and tensor.untyped_storage().data_ptr() not in self.before:
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())


def counted(pipeline, steps: int) -> tuple[float, int]:
    """Operations per step over ``steps`` steps after a warm-up (the optimiser's state is made
    by its first step), and the bytes the counted steps left alive."""
    pipeline.start()
    try:
        pipeline.run(2)
        issued = Issued()
        pipeline.run(steps, issued)
        return issued.ops / steps, issued.alive_bytes()
    finally:
        pipeline.close()


def test_clusterbenchs_step_issues_what_the_bare_loop_does_and_keeps_no_more_alive():
    case = Case("small_cnn", batch_size=8, size=8, width=4)
    device = torch.device("cpu")
    ours = LightningPipeline("clusterbench", case, device, False, 12)
    # the next batch Lightning holds, as the step takes it: two float32 views and the labels
    fetched_ahead = case.batch_size * (2 * 3 * case.size * case.size * 4 + 8)
    ours_ops, ours_alive = counted(ours, 8)
    bare_ops, bare_alive = counted(BareLoop("bare loop", case, device, False, 12), 8)
    assert ours_ops <= bare_ops / TARGET_RATE, (ours_ops, bare_ops)
    # what survives the steps: the bare loop frees the gradients after each step; Lightning
    # zeroed them only after the next forward pass, so they stayed alive through it (the
    # method's step now frees them as the bare loop does). Lightning also holds the next batch,
    # fetched ahead to know which one is the last (its views and labels).
    assert ours_alive <= TARGET_MEMORY * bare_alive + fetched_ahead, (ours_alive, bare_alive)
