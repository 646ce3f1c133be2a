"""A 2-D t-SNE of the frozen test features, coloured by label: the ``tsne`` protocol (a figure
for the run's report, no metric).

Reference: van der Maaten and Hinton, "Visualizing Data using t-SNE" (JMLR 2008), no arXiv id;
TransFusion (Liu et al., "TransFusion: Contrastive Learning with Attention Layers", a submission
under double-blind review, no arXiv id) shows its embeddings this way.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.infra.plots import check_tsne_iterations
from benchmarks.protocols.protocol import EvaluationInputs, EvaluationProtocol, ProtocolOutput
from modules.methods.capabilities import Encoder


@dataclass(frozen=True)
class TsneSettings:
    """scikit-learn's TSNE, cosine metric, seeded with the run's seed, on a deterministic
    subsample of 1,000 test points (:func:`benchmarks.infra.plots.tsne_panels_png`);
    ``iterations``: its ``max_iter``, from 250 (scikit-learn's least) to 100,000; its default
    is 1,000."""

    iterations: int

    def __post_init__(self) -> None:
        check_tsne_iterations("tsne.iterations", self.iterations)


def run_tsne(settings: TsneSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    from benchmarks.infra.plots import tsne_panels_png

    _, _, test_x, test_y = inputs.features()
    return ProtocolOutput(figures={"tsne.png": tsne_panels_png(
        [test_x.numpy()], test_y.numpy(), ["test features"], seed=inputs.seed,
        iterations=settings.iterations)})


TSNE = EvaluationProtocol(
    name="tsne",
    summary="a 2-D t-SNE of the frozen test features, coloured by label (tsne.png)",
    settings=TsneSettings, needs=Encoder, run=run_tsne, example={"iterations": 1000},
)
