"""A public backbone by name, with weights from a local file: no training; its features are the
backbone's, without its classifier. A checkpoint from torchvision or timm gets a leaderboard row
beside the trained methods (``clusterbench evaluate torchvision:resnet18 --weights FILE``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

#: The libraries a backbone may come from, as ``<library>:<model name>``.
LIBRARIES = ("torchvision", "timm")
#: The attributes that hold a torchvision model's classifier.
HEADS = ("fc", "classifier", "heads", "head")


def build_backbone(arch: str) -> nn.Module:
    """``arch`` (``torchvision:resnet18``, ``timm:resnet18``) built without weights and without
    its classifier, so that it returns features; ValueError naming what is accepted.

    >>> build_backbone("torchvision:resnet18").eval()(torch.zeros(1, 3, 32, 32)).shape
    torch.Size([1, 512])
    """
    library, _, name = arch.partition(":")
    if library not in LIBRARIES or not name:
        raise ValueError(f"backbone {arch!r} is not <library>:<model>; libraries: "
                         f"{', '.join(LIBRARIES)} (e.g. torchvision:resnet18)")
    if library == "timm":
        import timm

        if name not in timm.list_models():
            raise ValueError(f"timm has no model {name!r} (timm.list_models() lists them)")
        return timm.create_model(name, pretrained=False, num_classes=0)
    import torchvision

    if name not in torchvision.models.list_models():
        raise ValueError(f"torchvision has no model {name!r} "
                         "(torchvision.models.list_models() lists them)")
    model = torchvision.models.get_model(name, weights=None)
    for head in HEADS:
        if hasattr(model, head):
            setattr(model, head, nn.Identity())
            return model
    raise ValueError(f"torchvision's {name} has none of the classifier attributes "
                     f"{', '.join(HEADS)}: its features cannot be taken")


class PretrainedBackbone(pl.LightningModule):
    """A torchvision or timm backbone (``arch``), its weights read from ``weights`` (a
    ``torch.save`` of its state dict, read with ``weights_only=True``); nothing is trained.

    ``encode(x)`` is the backbone's output before its classifier. Grey images are repeated over
    the three colour channels the backbone takes. Departures from how such a checkpoint was
    trained: the inputs keep the dataset's own normalisation and resolution (no ImageNet
    statistics, no resize), so features of small images are those of a few spatial positions.
    """

    requires_training = False
    epoch_metrics: tuple[str, ...] = ()
    unused_arguments: frozenset[str] = frozenset()

    def __init__(self, num_classes: int, input_shape: Sequence[int],
                 arch: str = "torchvision:resnet18", weights: str | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = build_backbone(arch)
        if weights is not None:
            self.load_backbone(Path(weights))

    def load_backbone(self, path: Path) -> None:
        """The state dict in ``path`` into the backbone; the classifier's weights, if the file
        has them, are left out. A file that is not a state dict, or whose keys or shapes do not
        fit (another architecture's), is a ValueError of one line naming the file, the
        architecture and the first mismatch. Built on the ``meta`` device (a suite's check of
        its values before anything runs), the file is read and checked, and nothing is copied:
        a meta parameter has no memory to copy into (torch warns once per tensor)."""
        from benchmarks.infra.tensor_files import load_tensors, state_mismatch

        arch = self.hparams.arch
        state = load_tensors(path, "weights file")
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            held = (f"a {type(state).__name__}" if not isinstance(state, dict) else
                    f"a dict keyed by {next(k for k in state if not isinstance(k, str))!r}")
            raise ValueError(f"weights file {path} holds {held}, not a state dict of {arch}'s "
                             "tensors by name (torch.save(model.state_dict(), FILE) writes one)")
        state = {k: v for k, v in state.items() if k.split(".")[0] not in HEADS}
        own = self.backbone.state_dict()
        mismatch = state_mismatch(own, state, arch.partition(":")[2])
        if mismatch is not None:
            raise ValueError(f"weights file {path} does not fit {arch}: {mismatch}")
        if not any(tensor.is_meta for tensor in own.values()):
            self.backbone.load_state_dict(state, strict=False)

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        return self.backbone(x).flatten(1)
