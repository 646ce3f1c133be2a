"""A checkpoint as Lightning writes one to resume a fit, without training for it: the tests that
need a checkpoint the resume check accepts (and then damage one field of it) start from it."""

from __future__ import annotations

from typing import Any

import torch


def counts(n: int) -> dict[str, int]:
    return {"ready": n, "started": n, "processed": n, "completed": n}


def resumable(epoch: int, global_step: int,
              state: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
    """What ``Trainer.save_checkpoint`` writes at the end of epoch ``epoch`` (counted from 0),
    with ``state`` (one tensor by default) as the weights and one optimiser of one group."""
    done = {"total": counts(epoch + 1), "current": counts(epoch + 1)}
    return {"epoch": epoch, "global_step": global_step, "pytorch-lightning_version": "2.6.0",
            "state_dict": state if state is not None else {"w": torch.ones(1)},
            "optimizer_states": [{"state": {}, "param_groups": [{"params": [0], "lr": 0.1}]}],
            "lr_schedulers": [{"last_epoch": global_step}],
            "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": done}}}
