"""kernel_infonce_moco trains as the MoCo CIFAR-10 recipe it follows says (He et al.,
arXiv:1911.05722 and its CIFAR-10 demo: SGD momentum 0.9, lr 0.06 at batch 512, key encoder
moving average 0.99), not with the moving average's 0.99 as SGD's momentum."""

from __future__ import annotations

from built_optimiser import built_optimiser, optimiser_settings

from benchmarks.suites.config import load_suite


def test_moco_suite_runs_build_sgd_at_momentum_0_9_and_lr_0_06_at_batch_512(tmp_path):
    suite = load_suite("kernel_infonce_moco")
    for run in suite.runs:
        assert run.model["key_momentum"] == 0.99 and run.model["momentum"] == 0.9, run.name
        assert run.data["batch_size"] == 512, run.name
    group = optimiser_settings(suite.runs[0], tmp_path, n_views=2)
    assert group["momentum"] == 0.9
    assert abs(group["initial_lr"] - 0.06) < 1e-12
    assert group["model"].key_momentum == 0.99


def test_moco_suite_runs_moco_as_its_sources_do(tmp_path):
    """One-directional loss (the demo's default, the authors' ``criterion(q, k)``), shuffled
    BatchNorm in the demo's 8 groups, the authors' 512-512-128 head without BatchNorm."""
    from modules.blocks.split_batch_norm import SplitBatchNorm

    suite = load_suite("kernel_infonce_moco")
    for run in suite.runs:
        assert run.model["symmetric"] is False and run.model["bn_splits"] == 8, run.name
        assert run.data["batch_size"] % run.model["bn_splits"] == 0, run.name
    model = optimiser_settings(suite.runs[0], tmp_path, n_views=2)["model"]
    assert [type(m).__name__ for m in model.projector] == ["Linear", "ReLU", "Linear"]
    assert [m.out_features for m in model.projector[::2]] == [512, 128]
    assert model.bn_splits == 8 and not model.symmetric
    assert any(isinstance(m, SplitBatchNorm) for m in model.key_backbone.modules())


def test_moco_suite_decays_every_parameter_as_the_demos_sgd(tmp_path):
    """The demo's ``SGD(model.parameters(), weight_decay=5e-4)``: biases and BatchNorm too."""
    optimiser, model = built_optimiser(load_suite("kernel_infonce_moco").runs[0], tmp_path, 2)
    decayed = {id(p) for g in optimiser.param_groups if g["weight_decay"] == 5e-4
               for p in g["params"]}
    trained = [p for n, p in model.named_parameters()
               if p.requires_grad and not n.startswith("online_probe")]
    assert any(p.ndim == 1 for p in trained)
    assert decayed == {id(p) for p in trained}
