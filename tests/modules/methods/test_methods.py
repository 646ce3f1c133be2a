"""Methods: the registry, hyperparameter records, and a fast_dev_run of each on digits."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from benchmarks.run.spec import init_parameters
from datamodules import DATAMODULES
from modules.losses import nt_xent_loss
from modules.methods import METHODS, RepresentationModule, SimCLR


def test_registry_names_are_lower_case_and_classes_say_whether_they_train():
    for name, cls in METHODS.items():
        assert name == name.lower()
        assert isinstance(cls.requires_training, bool)
        assert (cls.__doc__ or "").strip(), f"{name} has no docstring"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_hparams_record_every_argument_so_a_checkpoint_rebuilds_the_model(name):
    model = METHODS[name](num_classes=10, input_shape=(1, 8, 8))
    assert set(model.hparams) == init_parameters(METHODS[name], set())


def test_simclr_checkpoint_round_trip_restores_arguments_and_weights(tmp_path):
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, temperature=0.3,
                   lr=0.02, projector_hidden=16)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=16))
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    restored = SimCLR.load_from_checkpoint(tmp_path / "model.ckpt")
    assert restored.temperature == 0.3 and restored.lr == 0.02
    x = torch.randn(3, 1, 8, 8)
    torch.testing.assert_close(restored.eval().encode(x), model.eval().encode(x))


def test_simclr_objective_is_nt_xent_of_the_projected_views():
    torch.manual_seed(0)
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, temperature=0.25)
    features = torch.randn(2 * 6, model.backbone.output_dim)
    z = model.projector(features)
    expected = nt_xent_loss(z[:6], z[6:], temperature=0.25)
    torch.testing.assert_close(model.objective(features, 2, torch.zeros(6)), expected)
    with pytest.raises(ValueError, match="n_views=3"):
        model.objective(torch.randn(18, model.backbone.output_dim), 3, torch.zeros(6))


def test_online_probe_never_trains_the_backbone():
    torch.manual_seed(0)
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4)
    model.objective = lambda features, n_views, labels: features.sum() * 0.0  # probe loss only
    views, labels = [torch.randn(8, 1, 8, 8)] * 2, torch.randint(0, 10, (8,))
    model.training_step((views, labels), 0).backward()
    assert all(p.grad is None or not p.grad.any() for p in model.backbone.parameters())
    assert model.online_probe.weight.grad.abs().sum() > 0


#: The methods built on RepresentationModule (a backbone and the online probe); the tensorized
#: models have their own smoke tests in test_tensorized.py.
BACKBONE_METHODS = sorted(n for n, c in METHODS.items()
                          if c.requires_training and issubclass(c, RepresentationModule))


@pytest.mark.parametrize("name", BACKBONE_METHODS)
def test_fast_dev_run_on_digits(name, tmp_path):
    model = METHODS[name](num_classes=10, input_shape=(1, 8, 8), backbone_width=4)
    trainer = pl.Trainer(fast_dev_run=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=32))
    assert torch.isfinite(trainer.callback_metrics["train_loss"])
    assert 0.0 <= float(trainer.callback_metrics["online_val_acc"]) <= 1.0


def tiny_trainer(tmp_path, **kwargs) -> pl.Trainer:
    return pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, default_root_dir=tmp_path, accelerator="cpu",
                      **kwargs)


@pytest.mark.parametrize("batch_size, accumulate", [(32, 1), (64, 2)])
def test_learning_rate_is_per_256_samples_of_the_global_batch(tmp_path, batch_size, accumulate):
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, lr=0.4,
                   optimizer="sgd")
    trainer = tiny_trainer(tmp_path, accumulate_grad_batches=accumulate)
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=batch_size))
    optimizer = trainer.optimizers[0]
    expected = 0.4 * batch_size * accumulate / 256
    assert optimizer.param_groups[0]["initial_lr"] == pytest.approx(expected)
    assert optimizer.param_groups[-1]["initial_lr"] == pytest.approx(model.probe_lr)  # unscaled


def test_lars_adapts_weights_but_not_biases_norms_or_the_probe(tmp_path):
    from timm.optim import Lars

    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, optimizer="lars",
                   weight_decay=1e-6)
    trainer = tiny_trainer(tmp_path)
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=32))
    optimizer = trainer.optimizers[0]
    assert isinstance(optimizer, Lars)
    decay, no_decay, probe = optimizer.param_groups
    assert decay["weight_decay"] == 1e-6 and all(p.ndim > 1 for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and all(p.ndim <= 1 for p in no_decay["params"])
    assert probe["weight_decay"] == 0.0 and not decay["always_adapt"]  # timm: no adaptation
    assert {id(p) for p in probe["params"]} == {id(p) for p in model.online_probe.parameters()}


@pytest.mark.parametrize("loss, function, expected_kwargs", [
    ("nt_xent", "nt_xent_loss", {"temperature": 0.3}),
    ("laplacian", "kernel_infonce_loss", {"gamma": 1.0, "temperature": 0.3}),
    ("exponential", "kernel_infonce_loss", {"gamma": 0.7, "temperature": 0.3}),
    ("sum", "sum_kernel_loss", {"tau1": 0.2, "tau2": 0.6, "lam": 0.25}),
    ("concat_sum", "concat_sum_kernel_loss", {"tau1": 0.2, "tau2": 0.6, "lam": 0.25}),
])
def test_simclr_loss_names_reach_their_kernel_with_its_hyperparameters(loss, function,
                                                                        expected_kwargs):
    from modules import losses

    torch.manual_seed(0)
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, loss=loss,
                   temperature=0.3, gamma=0.7, tau1=0.2, tau2=0.6, lam=0.25, projector_out=8)
    assert model.projector[-1].out_features == (16 if loss == "concat_sum" else 8)
    features = torch.randn(12, model.backbone.output_dim)
    z1, z2 = model.projector(features).chunk(2)
    expected = getattr(losses, function)(z1, z2, **expected_kwargs)
    torch.testing.assert_close(model.objective(features, 2, torch.zeros(6)), expected)


def test_unknown_loss_names_are_refused_with_the_accepted_ones():
    from modules.methods import MoCo, TransFusion

    for cls, accepted in ((SimCLR, "concat_sum"), (TransFusion, "jsd_sq"), (MoCo, "laplacian")):
        with pytest.raises(ValueError, match=accepted):
            cls(num_classes=10, input_shape=(1, 8, 8), loss="cosine")


@pytest.mark.parametrize("include_diagonal", [False, True])
@pytest.mark.parametrize("kind", ["jsd_sq", "kl_sq", "kl_relu", "kl_sm"])
@pytest.mark.parametrize("scale", ["mean", "sum"])
def test_transfusion_objective_is_its_loss_on_the_last_blocks_affinity(kind, scale,
                                                                       include_diagonal):
    from modules.losses import transfusion_loss
    from modules.methods import TransFusion

    torch.manual_seed(0)
    model = TransFusion(num_classes=10, input_shape=(6,), backbone="flatten", num_blocks=3,
                        loss=kind, fusion_scale=scale, include_diagonal=include_diagonal)
    for block in model.blocks:
        torch.nn.init.normal_(block.value.weight, std=0.1)
    features, labels = torch.randn(8, 6), torch.tensor([0, 1, 0, 1])
    x = features
    for block in model.blocks[:2]:  # by hand: eq. 1-2 twice, then the last affinity
        a = block.query(x) @ block.key(x).T
        x = torch.relu(a) @ block.value(x) / (len(x) if scale == "mean" else 1) + x
    last = model.blocks[2]
    expected = transfusion_loss(last.query(x) @ last.key(x).T, labels.repeat(2), kind=kind,
                                include_diagonal=include_diagonal)
    torch.testing.assert_close(model.objective(features, 2, labels), expected)
    torch.testing.assert_close(model.embedding(features), x)


def test_transfusion_refuses_a_diagonal_for_supcon_and_a_non_boolean():
    from modules.methods import TransFusion

    with pytest.raises(ValueError, match="include_diagonal applies to the affinity losses"):
        TransFusion(num_classes=10, input_shape=(6,), loss="supcon", include_diagonal=True)
    with pytest.raises(ValueError, match="include_diagonal must be true or false, got 1"):
        TransFusion(num_classes=10, input_shape=(6,), include_diagonal=1)


def test_moco_key_encoder_is_a_moving_average_of_the_query_encoder():
    from modules.methods import MoCo

    model = MoCo(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, queue_size=8,
                 key_momentum=0.9)
    with torch.no_grad():
        for p in model.backbone.parameters():
            p.add_(1.0)
    before = [p.clone() for p in model.key_backbone.parameters()]
    model._momentum_update()
    for k, k0, q in zip(model.key_backbone.parameters(), before, model.backbone.parameters(),
                        strict=True):
        torch.testing.assert_close(k, 0.9 * k0 + 0.1 * q)
        assert not k.requires_grad


@pytest.mark.parametrize("name", BACKBONE_METHODS)
def test_bf16_autocast_and_channels_last_keep_losses_finite_and_float32(name):
    torch.manual_seed(0)
    model = METHODS[name](num_classes=10, input_shape=(1, 8, 8), backbone_width=4,
                          channels_last=True)
    views, labels = [torch.rand(8, 1, 8, 8), torch.rand(8, 1, 8, 8)], torch.arange(8) % 3
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model.training_step((views, labels), 0)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_pretrained_resnet_weights_offline_fail_with_a_message_saying_so(monkeypatch):
    import torchvision

    from modules.blocks.backbones import build_backbone

    def offline(*args, **kwargs):
        raise OSError("<urlopen error [Errno -3] Temporary failure in name resolution>")

    monkeypatch.setattr(torchvision.models.ResNet18_Weights.IMAGENET1K_V1, "get_state_dict",
                        offline)
    with pytest.raises(RuntimeError, match="need a network"):
        build_backbone("resnet18", (3, 32, 32), cifar_stem=False, weights="IMAGENET1K_V1")
    with pytest.raises(ValueError, match="cifar_stem"):
        build_backbone("resnet18", (3, 32, 32), cifar_stem=True, weights="IMAGENET1K_V1")


def test_hierarchical_transfusion_uses_the_datamodules_superclasses(tmp_path):
    from modules.losses import transfusion_loss
    from modules.methods import TransFusion

    class WithSuperclasses(DATAMODULES["digits"]):
        fine_to_coarse = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4, 4])  # pairs of digits

    torch.manual_seed(0)
    model = TransFusion(num_classes=10, input_shape=(1, 8, 8), backbone_width=4,
                        hierarchical=True, eps=0.25)
    tiny_trainer(tmp_path).fit(model, datamodule=WithSuperclasses(batch_size=16))
    features, labels = torch.randn(6, model.backbone.output_dim), torch.tensor([0, 1, 2])
    a = model.blocks[0].affinity(features)
    expected = transfusion_loss(a, labels.repeat(2), superclasses=torch.tensor([0, 0, 1] * 2),
                                eps=0.25)
    torch.testing.assert_close(model.objective(features, 2, labels), expected)
    flat = TransFusion(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, hierarchical=True)
    with pytest.raises(ValueError, match="fine_to_coarse"):
        tiny_trainer(tmp_path).fit(flat, datamodule=DATAMODULES["digits"](batch_size=16))


def test_resize_to_feeds_the_backbone_resized_images():
    model = SimCLR(num_classes=10, input_shape=(1, 8, 8), backbone="flatten", resize_to=16,
                   projector_hidden=8)
    assert model.backbone.output_dim == 16 * 16
    x = torch.rand(2, 1, 8, 8)
    expected = torch.nn.functional.interpolate(x, size=(16, 16), mode="bilinear",
                                               align_corners=False).flatten(1)
    torch.testing.assert_close(model.encode(x), expected)


@pytest.mark.parametrize("optimizer", ["sgd", "lars"])
def test_moco_optimiser_momentum_is_its_own_and_not_the_key_encoders(optimizer, tmp_path):
    """MoCo's moving-average coefficient (eq. 2's m, 0.99) and the optimiser's momentum (0.9)
    are two settings: the optimiser a run builds has the momentum its configuration asks for
    (it ran with 0.99 when the two shared one attribute)."""
    from types import SimpleNamespace

    from built_optimiser import optimiser_settings

    for model in ({"optimizer": optimizer, "momentum": 0.9, "key_momentum": 0.99},
                  {"optimizer": optimizer}):  # the defaults
        run = SimpleNamespace(method="moco", model={"queue_size": 8, **model},
                              data={"batch_size": 32}, trainer={})
        group = optimiser_settings(run, tmp_path, n_views=2)
        assert group["momentum"] == 0.9
        assert group["model"].key_momentum == 0.99


def test_a_moco_config_from_before_key_momentum_still_loads_and_says_what_momentum_sets():
    """``momentum: 0.99`` once set both the moving average and SGD's momentum; such a config
    still builds the same model and training (both 0.99), and warns that momentum is the
    optimiser's now."""
    from modules.methods.moco import MoCo

    with pytest.warns(UserWarning, match="momentum 0.99 is the sgd optimiser's; the key "
                                         "encoder's moving average is key_momentum"):
        model = MoCo(num_classes=3, input_shape=(1, 8, 8), backbone_width=4, queue_size=8,
                     optimizer="sgd", momentum=0.99)
    assert model.momentum == model.key_momentum == 0.99


def test_moco_momentum_update_is_the_per_parameter_rule_for_every_parameter():
    """theta_k <- m theta_k + (1 - m) theta_q (MoCo eq. 2), checked against a per-parameter loop
    in float64, and the BatchNorm buffers copied from the query encoder."""
    from modules.methods.moco import MoCo

    torch.manual_seed(0)
    model = MoCo(num_classes=3, input_shape=(1, 8, 8), backbone_width=4, key_momentum=0.9)
    with torch.no_grad():  # make the two encoders differ
        for p in [*model.backbone.parameters(), *model.projector.parameters()]:
            p.add_(torch.randn_like(p))
        for b in model.backbone.buffers():
            if b.is_floating_point():
                b.add_(1.0)
    pairs = [(model.key_backbone, model.backbone), (model.key_projector, model.projector)]
    expected = [0.9 * k.double() + 0.1 * q.double() for key, query in pairs
                for k, q in zip(key.parameters(), query.parameters(), strict=True)]
    buffers = [q.clone() for _, query in pairs for q in query.buffers()]
    model._momentum_update()
    got = [k for key, _ in pairs for k in key.parameters()]
    assert len(got) == len(expected) > 4
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.double(), e, rtol=1e-6, atol=1e-7)
    for g, e in zip([b for key, _ in pairs for b in key.buffers()], buffers, strict=True):
        assert torch.equal(g, e)


def test_a_method_sets_its_own_parameter_groups_and_their_learning_rates(tmp_path):
    """optimizer_groups is a method's hook: here the projector learns at a tenth of the run's
    rate (after the batch scaling), the rest keeps the default groups (weights with the weight
    decay, biases and norms without: what LARS leaves unadapted), the probe its own rate."""
    from modules.blocks.optim import parameter_groups

    class SlowProjector(SimCLR):
        def optimizer_groups(self):
            rest = parameter_groups(self.backbone, self.weight_decay)
            head = parameter_groups(self.projector, self.weight_decay)
            return rest + [{**group, "lr_scale": 0.1} for group in head]

    model = SlowProjector(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, lr=0.5,
                          weight_decay=1e-4, optimizer="lars", probe_lr=0.2)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", devices=1)
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=64))
    groups = trainer.optimizers[0].param_groups
    base = 0.5 * 64 / 256
    head = {id(p) for p in model.projector.parameters()}
    for group in groups[:-1]:
        in_head = {id(p) in head for p in group["params"]}
        assert len(in_head) == 1  # a group is the backbone's or the projector's
        assert group["initial_lr"] == pytest.approx(base * (0.1 if in_head.pop() else 1.0))
        assert group["weight_decay"] == (1e-4 if group["params"][0].ndim > 1 else 0.0)
    assert groups[-1]["initial_lr"] == 0.2  # the probe
    assert len(groups) == 5


@pytest.mark.parametrize("queue_size, warned", [(4096, True), (64, False)])
def test_moco_says_when_its_queue_is_larger_than_the_training_images(tmp_path, queue_size,
                                                                     warned):
    """MoCo's default queue (4,096 keys) on digits' training images: each image's own earlier
    keys would be among its negatives without a word."""
    import warnings

    from modules.methods import MoCo

    model = MoCo(num_classes=10, input_shape=(1, 8, 8), backbone_width=4, queue_size=queue_size)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=32))
    said = [str(w.message) for w in caught if "queue_size" in str(w.message)]
    images = len(trainer.train_dataloader.dataset)
    assert said == ([f"MoCo's queue_size 4096 is more than the {images} training images: each "
                     "image's own earlier keys are among its negatives; a queue_size below the "
                     "training set avoids it"] if warned else [])
