"""MoCo as its sources run it (He et al., arXiv:1911.05722, its CIFAR-10 demo, and the
Kernel-InfoNCE authors' MoCo code): a one-directional loss unless asked, a projector without
BatchNorm, and shuffled BatchNorm; each checked against a reference built by hand."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from modules.blocks.split_batch_norm import SplitBatchNorm
from modules.methods import MoCo


def naive_infonce(q, k, queue, temperature):
    """MoCo's eq. 1 by loops in float64: each query against its key and every queued key."""
    q, k, queue = (F.normalize(t.detach().double(), dim=1) for t in (q, k, queue))
    total = 0.0
    for i in range(len(q)):
        positive = math.exp(float(q[i] @ k[i]) / temperature)
        negatives = sum(math.exp(float(q[i] @ n) / temperature) for n in queue)
        total += -math.log(positive / (positive + negatives))
    return total / len(q)


def tiny_moco(**kwargs) -> MoCo:
    torch.manual_seed(0)
    settings = {"queue_size": 8, **kwargs}
    return MoCo(num_classes=3, input_shape=(1, 8, 8), backbone_width=4, projector_hidden=16,
                projector_out=4, **settings)


def batch(size: int = 8):
    generator = torch.Generator().manual_seed(1)
    views = [torch.rand(size, 1, 8, 8, generator=generator) for _ in range(2)]
    return views, torch.arange(size) % 3


@pytest.mark.parametrize("symmetric", [False, True])
def test_the_loss_is_one_directional_unless_symmetric_is_asked(symmetric):
    """Default: queries of view 1 against keys of view 2 (the demo's default, the authors'
    ``criterion(q, k)``); ``symmetric``: the demo's sum of both directions."""
    model = tiny_moco(symmetric=symmetric, bn_splits=1)
    views, labels = batch()
    queue = model.queue.clone()
    reference = copy.deepcopy(model)  # step 0: the key encoder equals the query encoder
    loss = model.training_step((views, labels), 0)

    def encode(net, head, x):
        return head(net(x))

    q = [encode(reference.backbone, reference.projector, v) for v in views]
    k = [encode(reference.key_backbone, reference.key_projector, v) for v in views]
    expected = naive_infonce(q[0], k[1], queue, 0.1)
    if symmetric:
        expected += naive_infonce(q[1], k[0], queue, 0.1)
    probe = F.cross_entropy(reference.online_probe(reference.backbone(views[0])), labels)
    assert loss.item() == pytest.approx(expected + probe.item(), rel=1e-5)


@pytest.mark.parametrize("symmetric", [False, True])
def test_a_step_enqueues_the_keys_of_its_key_views(symmetric):
    model = tiny_moco(queue_size=32, symmetric=symmetric)
    model.training_step(batch(), 0)
    assert int(model.queue_ptr) == (16 if symmetric else 8)


def test_the_projector_is_the_authors_head_without_batch_norm():
    with torch.device("meta"):
        model = MoCo(num_classes=10, input_shape=(3, 32, 32), backbone="resnet18")
    assert [type(m).__name__ for m in model.projector] == ["Linear", "ReLU", "Linear"]
    assert [(m.in_features, m.out_features) for m in model.projector[::2]] == [(512, 512),
                                                                              (512, 128)]


def test_every_batch_norm_of_both_encoders_is_split_and_stays_per_device_under_ddp():
    """Lightning's ``sync_batchnorm`` (on for multi-GPU runs) converts every ``_BatchNorm`` to
    a SyncBatchNorm over all devices, which would normalise a query and its key together."""
    with torch.device("meta"):
        model = MoCo(num_classes=10, input_shape=(3, 32, 32), backbone="resnet18")
    nn.SyncBatchNorm.convert_sync_batchnorm(model)
    for encoder in (model.backbone, model.key_backbone):
        norms = [m for m in encoder.modules() if isinstance(m, nn.modules.batchnorm._NormBase)]
        assert len(norms) == 20 and all(isinstance(m, SplitBatchNorm) for m in norms)


def test_keys_come_from_the_shuffled_batch_normalised_in_groups():
    """With 2 splits, the keys equal those of an unsplit key encoder run on each half of the
    randomly permuted batch on its own, put back in the images' order: a query (normalised
    with its own view's block) and its key do not share BatchNorm statistics."""
    model = tiny_moco(bn_splits=2)
    views, _ = batch()
    plain = copy.deepcopy(model.key_backbone)
    for module in plain.modules():
        if isinstance(module, SplitBatchNorm):
            module.num_splits = 1
    torch.manual_seed(5)
    order = torch.randperm(8)
    torch.manual_seed(5)
    keys = model._keys_of(views[1], 2)

    expected = torch.empty(8, 4)
    shuffled = views[1][order]
    for half in (slice(0, 4), slice(4, 8)):
        z = model.key_projector(plain(shuffled[half]))
        expected[order[half]] = F.normalize(z, dim=1)
    torch.testing.assert_close(keys, expected)
    assert not torch.equal(order, torch.arange(8))
    unshuffled = torch.cat([F.normalize(model.key_projector(plain(views[1][h])), dim=1)
                            for h in (slice(0, 4), slice(4, 8))])
    assert not torch.allclose(keys, unshuffled, atol=1e-4)  # the shuffle changed the groups


def test_symmetric_queries_are_normalised_per_view():
    """One pass over both query views with twice the splits equals one pass per view, as the
    demo's two calls of its query encoder."""
    model = tiny_moco(symmetric=True, bn_splits=2)
    views, labels = batch()
    model.training_step((views, labels), 0)
    assert {m.num_splits for m in model.backbone.modules() if isinstance(m, SplitBatchNorm)} \
        == {4}
    both = model.backbone(torch.cat(views))
    for module in model.backbone.modules():
        if isinstance(module, SplitBatchNorm):
            module.num_splits = 2
    torch.testing.assert_close(both, torch.cat([model.backbone(v) for v in views]))


def test_a_batch_the_splits_do_not_divide_is_refused_in_one_line():
    model = tiny_moco(bn_splits=3)
    with pytest.raises(ValueError, match="MoCo's bn_splits 3 must be a multiple of the 1 "
                                         "device.* per-device batch of 8"):
        model.training_step(batch(), 0)
    with pytest.raises(ValueError, match="symmetric must be true or false, got 'yes'"):
        tiny_moco(symmetric="yes")
    with pytest.raises(ValueError, match="bn_splits must be an integer of at least 1, got 0"):
        tiny_moco(bn_splits=0)
