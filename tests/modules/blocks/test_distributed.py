"""Two CPU processes (gloo) must give the loss and gradients of one process on the global batch.

Each rank holds half of the batch; embeddings are gathered with autograd-aware collectives, every
rank computes the global loss, and gradients are averaged over ranks as DDP does. The projector
is a plain linear layer here: BatchNorm statistics are per process by design.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from start_method import start_method
from torch import nn

from modules.blocks.distributed import shuffle_across_devices
from modules.methods import MoCo, SimCLR, SupCon, TransFusion

WORLD, BATCH, FEATURES = 2, 8, 6  # BATCH is the global batch, split over the ranks

CASES = {
    "simclr/nt_xent": lambda: SimCLR(10, (1, 8, 8), loss="nt_xent", temperature=0.3),
    "simclr/sum": lambda: SimCLR(10, (1, 8, 8), loss="sum", tau1=0.4, tau2=0.2, lam=0.3),
    "simclr/concat_sum": lambda: SimCLR(10, (1, 8, 8), loss="concat_sum", projector_out=4),
    "supcon": lambda: SupCon(10, (1, 8, 8), temperature=0.2),
    "transfusion": lambda: TransFusion(10, (FEATURES,), backbone="flatten", num_blocks=2),
}


def build(case: str) -> nn.Module:
    torch.manual_seed(0)
    model = CASES[case]()
    if hasattr(model, "projector"):
        out = model.projector[-1].out_features
        model.projector = nn.Linear(FEATURES, out)
    for block in getattr(model, "blocks", []):  # W_V starts at zero; give it values to matter
        nn.init.normal_(block.value.weight, std=0.1)
    return model


def global_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    view1 = torch.randn(BATCH, FEATURES, generator=generator)
    view2 = view1 + 0.1 * torch.randn(BATCH, FEATURES, generator=generator)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 3])
    return view1, view2, labels


def loss_and_grads(model: nn.Module, view1, view2, labels):
    features = torch.cat([view1, view2])  # view-major, as the base training step stacks them
    loss = model.objective(features, 2, labels)
    params = [p for n, p in model.named_parameters()
              if p.requires_grad and not n.startswith(("backbone", "online"))]
    # No allow_unused: DDP refuses a trainable parameter the loss does not reach.
    return loss.detach(), list(torch.autograd.grad(loss, params))


def moco_keys(images: torch.Tensor, splits: int) -> torch.Tensor:
    """MoCo's keys of ``images`` with shuffled BatchNorm of 2 groups in the global batch, the
    shuffle's random order drawn after seeding (on rank 0 under DDP)."""
    torch.manual_seed(0)
    model = MoCo(10, (1, 4, 4), backbone_width=2, queue_size=8, projector_hidden=4,
                 projector_out=3, bn_splits=2)
    torch.manual_seed(7)
    return model._keys_of(images, splits)


def moco_images() -> torch.Tensor:
    return torch.rand(BATCH, 1, 4, 4, generator=torch.Generator().manual_seed(3))


def worker(rank: int, init_file: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD)
    try:
        view1, view2, labels = global_batch()
        part = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
        results = {}
        for case in CASES:
            loss, grads = loss_and_grads(build(case), view1[part], view2[part], labels[part])
            for grad in grads:  # what DDP does with the parameter gradients
                dist.all_reduce(grad)
                grad /= WORLD
            results[case] = {"loss": loss, "grads": grads}
        # shuffled BatchNorm: a real shuffle across the devices, one group on each
        keys = moco_keys(moco_images()[part], splits=1)
        results["moco_keys"] = [torch.empty_like(keys) for _ in range(WORLD)]
        dist.all_gather(results["moco_keys"], keys)
        _, order = shuffle_across_devices(torch.arange(BATCH // WORLD) + rank * BATCH // WORLD)
        results["moco_order"] = order
        if rank == 0:
            torch.save(results, out_file)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def distributed_results(tmp_path_factory):
    """Every case computed once by two gloo processes (forked where it is safe: starting them
    is the slow part)."""
    tmp = tmp_path_factory.mktemp("gloo")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.start_processes(worker, args=(str(tmp / "init"), str(tmp / "rank0.pt")), nprocs=WORLD,
                       join=True, start_method=start_method())
    return torch.load(tmp / "rank0.pt")


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_processes_match_one_process_on_the_global_batch(case, distributed_results):
    expected_loss, expected_grads = loss_and_grads(build(case), *global_batch())
    got = distributed_results[case]
    torch.testing.assert_close(got["loss"], expected_loss)
    for grad, want in zip(got["grads"], expected_grads, strict=True):
        torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-6)


def test_moco_enqueues_the_keys_of_every_rank_once():
    model = MoCo(10, (1, 8, 8), backbone_width=4, queue_size=6, projector_out=3)
    keys = torch.nn.functional.normalize(torch.randn(4, 3), dim=1)
    model._enqueue(keys)
    torch.testing.assert_close(model.queue[:4], keys)
    assert int(model.queue_ptr) == 4
    model._enqueue(keys)  # wraps around: the queue holds the newest 6 keys
    torch.testing.assert_close(model.queue[4:], keys[:2])
    torch.testing.assert_close(model.queue[:2], keys[2:])
    assert int(model.queue_ptr) == 2


def test_moco_shuffles_keys_across_devices_as_one_device_with_split_batch_norm(
        distributed_results):
    """Two processes, each normalising its own share of the globally shuffled key images, give
    the keys one process gives with two BatchNorm groups and the same random order; and each
    process's share holds images of the other (a shuffle across devices, not within)."""
    got = torch.cat(distributed_results["moco_keys"])
    torch.testing.assert_close(got, moco_keys(moco_images(), splits=2))
    shares = distributed_results["moco_order"].view(WORLD, -1)
    assert sorted(shares.flatten().tolist()) == list(range(BATCH))
    assert any((share >= BATCH // WORLD).any() and (share < BATCH // WORLD).any()
               for share in shares)
