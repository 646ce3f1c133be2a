r"""TransFusion's Theorem 2 (Liu et al., "TransFusion: Contrastive Learning with Attention
Layers", section 3.2, Definition 1, Theorem 2, Figure 3) as an experiment: the map of the
sharpness-increment bound :math:`\gamma(\rho, \varepsilon)` and the per-block sharpness
increments that standalone TransFusion models trained on *generated* ``subspaces`` data reach,
compared with :math:`\gamma` at each dataset's measured :math:`\rho`."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.experiments.kit import QuietLightning, TorchThreads
from benchmarks.experiments.transfusion_theorem2.figures import gamma_map_png, sharpness_png
from benchmarks.experiments.transfusion_theorem2.measure import (
    Theorem2Settings,
    gamma_map,
    layer_rows,
    summarise_map,
    train_and_measure,
)
from benchmarks.experiments.transfusion_theorem2.tables import (
    BOUND_TABLE,
    LAYER_TABLE,
    SEED_TABLE,
    bound_table,
    layer_table,
    reading_notes,
    setup_notes,
    verdict_notes,
)
from benchmarks.suites.experiment import ExperimentOutput


def run(seeds: Sequence[int], epochs: int, eps: list[float], n_subspaces: list[int],
        n_samples: int, ambient_dim: int, rank: int, data_seed: int, batch_size: int,
        num_blocks: int, loss: str, lr: float, scores: list[str], grid: int,
        torch_threads: int) -> ExperimentOutput:
    """The γ map and the per-layer tables over ``seeds`` (one trained model per seed, noise
    level and number of subspaces). Every setting comes from the suite file
    (``benchmarks/transfusion_theorem2.yaml``).

    Args:
        seeds: one trained model per seed, noise level and number of subspaces.
        epochs: training epochs of every model.
        eps, n_subspaces: the noise levels ε and numbers of subspaces of the data.
        n_samples, ambient_dim, rank, data_seed: the ``subspaces`` datamodule's data.
        batch_size, num_blocks, loss, lr: the model and its training (Adam, lr per 256 samples).
        scores: the score kinds of Definition 1's sharpness (``relu``, ``raw``, ``square``).
        grid: the map's resolution per axis.
        torch_threads: torch's CPU threads during the run (restored afterwards).
    """
    cfg = Theorem2Settings(seeds=list(seeds), epochs=epochs, eps=list(eps),
                           n_subspaces=list(n_subspaces), n_samples=n_samples,
                           ambient_dim=ambient_dim, rank=rank, data_seed=data_seed,
                           batch_size=batch_size, num_blocks=num_blocks, loss=loss, lr=lr,
                           scores=list(scores), grid=grid)
    the_map = gamma_map(cfg.grid)
    runs = []
    with TorchThreads(torch_threads), QuietLightning():
        for kappa in cfg.n_subspaces:
            for noise in cfg.eps:
                for seed in cfg.seeds:
                    measured = train_and_measure(cfg, kappa, noise, seed)
                    runs.append(measured)
                    print(f"κ={kappa} ε={noise} seed={seed}: ρ={measured['rho']:.4f} train "
                          f"{measured['train_seconds']:.1f} s, loss "
                          f"{measured['train_loss']:.4f}", flush=True)
    rows = layer_rows(cfg, runs)
    output = ExperimentOutput()
    output.tables[BOUND_TABLE] = bound_table(summarise_map(the_map))
    output.tables[LAYER_TABLE] = layer_table(rows)
    output.tables[SEED_TABLE] = rows
    output.notes += setup_notes(cfg) + verdict_notes(cfg, rows) + reading_notes()
    output.figures["gamma_map.png"] = gamma_map_png(the_map)
    output.figures["sharpness_per_layer.png"] = sharpness_png(cfg, rows)
    return output
