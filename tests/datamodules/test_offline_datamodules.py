"""The offline DataModules: iris and penguins (real), and the generated sets (blobs, subspaces,
the line sets, transformed images). Their geometry is checked with the tests' own linear algebra
(SVD, projections, scipy's resampling), not with the generators' code."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from datamodules import (
    DATAMODULES,
    BlobsDataModule,
    IrisDataModule,
    Lines3DDataModule,
    OrthogonalDataModule,
    ParallelLinesDataModule,
    PenguinsDataModule,
    SubspacesDataModule,
    TransformedImagesDataModule,
    TriangleDataModule,
)

REAL = {"iris": 150, "penguins": 333}  # name -> rows in all
GENERATED = {"blobs": 1000, "subspaces": 400, "parallel_lines": 150, "orthogonal": 150,
             "triangle": 150, "lines3d": 300, "transformed_images": 300}
ALL = {**REAL, **GENERATED}
GENERATED_VECTORS = ["blobs", "subspaces", "parallel_lines", "orthogonal", "triangle", "lines3d"]


def rows(x: torch.Tensor) -> Counter:
    return Counter(row.numpy().tobytes() for row in x.contiguous())


def everything(name: str, dm) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole data set, independently of the datamodule's split."""
    if name == "iris":
        from sklearn.datasets import load_iris

        data = load_iris()
        return torch.tensor(data.data, dtype=torch.float32), torch.as_tensor(data.target)
    if name == "penguins":
        from palmerpenguins import load_penguins

        table = load_penguins().dropna()
        x = table[["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]]
        y = table["species"].map({"Adelie": 0, "Chinstrap": 1, "Gentoo": 2})
        return torch.tensor(x.to_numpy(), dtype=torch.float32), torch.tensor(y.to_numpy())
    if name == "blobs":  # scikit-learn's generator with the documented defaults
        from sklearn.datasets import make_blobs

        x, y = make_blobs(n_samples=1000, n_features=8, centers=5, cluster_std=1.0,
                          center_box=(-10.0, 10.0), random_state=0)
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    if name == "transformed_images":
        sample = dm.generate()
        return sample.images, sample.labels
    generated = dm.generate()
    x, y = (generated.x, generated.y) if name == "subspaces" else generated
    return torch.tensor(x, dtype=torch.float32), torch.as_tensor(y)


def principal_direction(points: np.ndarray) -> np.ndarray:
    centred = points - points.mean(0)
    return np.linalg.svd(centred, full_matrices=False)[2][0]


# -- registry and documentation ------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ALL))
def test_registered_and_documented(name: str) -> None:
    cls = DATAMODULES[name]
    assert cls.name == name
    assert cls.provenance == ("real" if name in REAL else "generated")
    assert cls.__doc__ and len(cls.__doc__) > 200
    dm = cls()
    assert dm.source and (dm.source.startswith("generated: ") == (name in GENERATED))
    assert isinstance(dm.num_classes, int) and isinstance(dm.input_shape, tuple)


def test_generated_source_names_the_parameters() -> None:
    assert "0.2" in SubspacesDataModule(epsilon=0.2).source
    assert "rank-3" in SubspacesDataModule(rank=3).source
    assert "n=120" in ParallelLinesDataModule(n_samples=120).source
    assert "data_seed 7" in BlobsDataModule(data_seed=7).source
    assert "40 copies" in TransformedImagesDataModule(copies=40).source


# -- shapes, labels, splits ----------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ALL))
def test_load_shapes_dtypes_labels_and_test_split(name: str) -> None:
    dm = DATAMODULES[name]()
    data = dm.load()
    for x, y in ((data.train_x, data.train_y), (data.test_x, data.test_y)):
        assert x.dtype == torch.float32 and y.dtype == torch.long
        assert x.shape == (len(y), *dm.input_shape)
        assert not torch.isnan(x).any()
        assert set(y.tolist()) == set(range(dm.num_classes))
    total = len(data.train_y) + len(data.test_y)
    assert total == ALL[name]
    assert len(data.test_y) == math.ceil(0.25 * total)  # the documented 25% test split
    # Stratified: each class has (to one sample) its share of the test split.
    whole = torch.bincount(torch.cat([data.train_y, data.test_y]), minlength=dm.num_classes)
    test = torch.bincount(data.test_y, minlength=dm.num_classes)
    assert (test.double() - 0.25 * whole.double()).abs().max() <= 1.0


@pytest.mark.parametrize("name", list(ALL))
def test_splits_partition_the_data(name: str) -> None:
    dm = DATAMODULES[name](batch_size=64)
    data = dm.load()
    x, y = everything(name, dm)
    assert rows(data.train_x) + rows(data.test_x) == rows(x)
    assert Counter(torch.cat([data.train_y, data.test_y]).tolist()) == Counter(y.tolist())
    dm.setup()
    train, val = dm.split_indices["train"], dm.split_indices["val"]
    assert not set(train.tolist()) & set(val.tolist())
    assert len(train) + len(val) == len(data.train_y)
    sizes = dm.split_sizes()
    assert sizes["test"] == len(data.test_y)
    assert sizes["val"] == math.ceil(0.1 * len(data.train_y))


@pytest.mark.parametrize("name", list(REAL))
def test_real_test_split_ignores_the_run_seed(name: str) -> None:
    a, b = DATAMODULES[name](seed=0), DATAMODULES[name](seed=1)
    assert torch.equal(a.load().test_x, b.load().test_x)
    a.setup(), b.setup()
    assert not torch.equal(a.split_indices["val"], b.split_indices["val"])


@pytest.mark.parametrize("name", list(GENERATED))
def test_generated_data_follow_data_seed_only(name: str) -> None:
    cls = DATAMODULES[name]
    first, again = cls(data_seed=3).load(), cls(data_seed=3, seed=5).load()
    other = cls(data_seed=4).load()
    for field in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(first, field), getattr(again, field))
    assert not torch.equal(first.train_x, other.train_x)


# -- views ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ALL))
@pytest.mark.parametrize("n_views", [1, 3])
def test_training_batch_becomes_n_views(name: str, n_views: int) -> None:
    dm = DATAMODULES[name](batch_size=32, n_views=n_views)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    views, labels = dm.on_after_batch_transfer((x, y), 0)
    assert isinstance(views, list) and len(views) == n_views
    assert all(v.shape == (32, *dm.input_shape) and v.dtype == torch.float32 for v in views)
    assert torch.equal(labels, y)
    assert all(not torch.equal(views[a], views[b])
               for a in range(n_views) for b in range(a + 1, n_views))
    # Every sample its own draw: no two rows moved by the same amount.
    moved = views[0] - dm.normalise(x)
    assert len({row.numpy().tobytes() for row in moved}) == 32


@pytest.mark.parametrize("name", ["iris", "penguins", "blobs", "parallel_lines", "subspaces"])
def test_vector_jitter_has_the_documented_scale(name: str) -> None:
    # Real tables: jitter_std in standardised units; generated sets: in the data's own units.
    torch.manual_seed(0)
    dm = DATAMODULES[name](batch_size=4096, n_views=1, jitter_std=0.2)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    x = x.repeat(20, 1)  # more draws for a tighter estimate
    (view,), _ = dm.on_after_batch_transfer((x, y.repeat(20)), 0)
    scale = dm.std if name in REAL else torch.ones(x.shape[1])
    noise = (view - dm.normalise(x)) * dm.std / scale  # back in the documented units
    assert noise.std(0).numpy() == pytest.approx(np.full(x.shape[1], 0.2), rel=0.1)


# -- real tables ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(REAL))
def test_real_tables_are_standardised_with_training_statistics(name: str) -> None:
    dm = DATAMODULES[name](batch_size=64)
    x = torch.cat([batch[0] for batch in dm.train_eval_dataloader()])
    assert x.mean(0).numpy() == pytest.approx(np.zeros(4), abs=1e-5)
    assert x.std(0).numpy() == pytest.approx(np.ones(4), abs=1e-4)
    assert not torch.isnan(torch.cat([batch[0] for batch in dm.test_dataloader()])).any()


def test_penguins_are_the_complete_rows_of_the_package() -> None:
    from palmerpenguins import load_penguins

    table = load_penguins()
    complete = table.dropna()
    assert len(complete) == 333 and not complete.isna().any().any()
    data = PenguinsDataModule().load()
    counts = torch.bincount(torch.cat([data.train_y, data.test_y]))
    assert counts.tolist() == [int((complete["species"] == s).sum())
                               for s in ("Adelie", "Chinstrap", "Gentoo")]


def test_iris_is_scikit_learns() -> None:
    from sklearn.datasets import load_iris

    data = IrisDataModule().load()
    assert rows(data.train_x) + rows(data.test_x) == rows(
        torch.tensor(load_iris().data, dtype=torch.float32))


@pytest.mark.parametrize("name", GENERATED_VECTORS)
def test_generated_vectors_are_not_standardised(name: str) -> None:
    dm = DATAMODULES[name](batch_size=64)
    data = dm.load()
    x = torch.cat([batch[0] for batch in dm.test_dataloader()])
    assert torch.equal(x, data.test_x)  # the evaluation loaders give the data as generated


# -- subspaces (TransFusion, section 3) ----------------------------------------------------------
@pytest.fixture(scope="module")
def subspaces():
    return SubspacesDataModule(n_samples=300, ambient_dim=10, rank=2, n_subspaces=3,
                               epsilon=0.1).generate()


def test_subspace_points_are_unit_and_within_the_noise_cone(subspaces) -> None:
    x, clean = subspaces.x, subspaces.clean
    assert np.linalg.norm(x, axis=1) == pytest.approx(np.ones(len(x)))
    assert np.linalg.norm(clean, axis=1) == pytest.approx(np.ones(len(x)))
    cosine = np.sum(x * clean, axis=1)
    assert cosine.min() >= 1 - 0.1 - 1e-12
    assert cosine.min() < 1 - 0.08  # the noise does use the cone it is allowed
    assert cosine.max() < 1.0 and np.isclose(cosine.max(), 1.0, atol=1e-3)


def test_clean_points_lie_in_their_rank_r_subspace(subspaces) -> None:
    for k in range(3):
        members = subspaces.clean[subspaces.y == k]
        singular = np.linalg.svd(members, compute_uv=False)
        assert singular[2] < 1e-10 * singular[0]  # rank 2
        basis = subspaces.bases[k]
        assert basis.T @ basis == pytest.approx(np.eye(2))
        residual = members - members @ basis @ basis.T
        assert np.abs(residual).max() < 1e-12
        # The noisy points are off the subspace, by no more than the cone allows.
        off = np.linalg.norm(subspaces.x[subspaces.y == k] @ (np.eye(10) - basis @ basis.T),
                             axis=1)
        assert off.max() <= math.sqrt(1 - 0.9 ** 2) + 1e-12 and off.min() > 0


def test_rho_is_attained_by_vectors_orthogonal_to_each_subspace(subspaces) -> None:
    unit = subspaces.clean / np.linalg.norm(subspaces.clean, axis=1, keepdims=True)
    margins = []
    for k in range(3):
        u = subspaces.u_perp[k]
        assert np.linalg.norm(u) == pytest.approx(1.0)
        assert np.abs(subspaces.bases[k].T @ u).max() < 1e-10
        margins.append(np.abs(unit[subspaces.y != k] @ u).min())
    assert min(margins) == pytest.approx(subspaces.rho, abs=1e-12)
    assert subspaces.rho > 0


def test_rho_beats_a_random_search_for_every_subspace(subspaces) -> None:
    rng = np.random.default_rng(1)
    unit = subspaces.clean
    for k in range(3):
        basis = subspaces.bases[k]
        w = rng.standard_normal((20000, 10))
        w -= w @ basis @ basis.T  # into the orthogonal complement
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        random_best = np.abs(unit[subspaces.y != k] @ w.T).min(0).max()
        ours = np.abs(unit[subspaces.y != k] @ subspaces.u_perp[k]).min()
        assert ours >= random_best - 1e-9


@pytest.mark.parametrize("data_seed", [0, 1, 2])
def test_rho_of_two_lines_is_the_sine_of_their_angle(data_seed: int) -> None:
    dm = SubspacesDataModule(n_samples=40, ambient_dim=6, rank=1, n_subspaces=2,
                             data_seed=data_seed)
    u1, u2 = dm.bases[0][:, 0], dm.bases[1][:, 0]
    assert dm.rho == pytest.approx(math.sqrt(1 - (u1 @ u2) ** 2), abs=1e-9)


def segment_distance_to_origin(a: np.ndarray, b: np.ndarray) -> float:
    t = np.clip(a @ (a - b) / ((a - b) @ (a - b)), 0.0, 1.0)
    return float(np.linalg.norm(a + t * (b - a)))


@pytest.mark.parametrize("data_seed", [0, 1, 2])
def test_rho_of_three_lines_is_the_exact_max_min(data_seed: int) -> None:
    # Rank 1: the other clusters' unit points are +-u_j, +-u_k, so for w in U_i's complement the
    # best min(|u_j . w|, |u_k . w|) is the distance from the origin to the segment between the
    # projections of u_j and +-u_k, the better of the two signs.
    dm = SubspacesDataModule(n_samples=60, ambient_dim=5, rank=1, n_subspaces=3,
                             data_seed=data_seed)
    u = dm.bases[:, :, 0]
    exact = []
    for i in range(3):
        project = np.eye(5) - np.outer(u[i], u[i])
        j, k = (other for other in range(3) if other != i)
        a, b = project @ u[j], project @ u[k]
        exact.append(max(segment_distance_to_origin(a, b), segment_distance_to_origin(a, -b)))
    assert dm.rho == pytest.approx(min(exact), abs=1e-6)


def test_subspaces_reject_bad_options() -> None:
    with pytest.raises(ValueError, match="rank"):
        SubspacesDataModule(rank=16, ambient_dim=16)
    with pytest.raises(ValueError, match="epsilon"):
        SubspacesDataModule(epsilon=1.5)
    with pytest.raises(ValueError, match="test_fraction"):
        SubspacesDataModule(test_fraction=1.0)


# -- the line sets ([CSRL] / [TAE]) --------------------------------------------------------------
LINE_SETS = {  # class, d, n, C (the paper), intrinsic dimension
    "parallel_lines": (ParallelLinesDataModule, 5, 150, 2, 2),
    "orthogonal": (OrthogonalDataModule, 5, 150, 2, 2),
    "triangle": (TriangleDataModule, 6, 150, 3, 2),
    "lines3d": (Lines3DDataModule, 6, 300, 3, 3),
}


@pytest.mark.parametrize("name", list(LINE_SETS))
def test_line_sets_have_the_papers_sizes(name: str) -> None:
    cls, d, n, c, _ = LINE_SETS[name]
    x, y = cls().generate()
    assert x.shape == (n, d) and sorted(set(y.tolist())) == list(range(c))
    assert cls().num_classes == c and cls().input_shape == (d,)


@pytest.mark.parametrize("name", list(LINE_SETS))
def test_without_spread_every_cluster_is_collinear(name: str) -> None:
    cls, *_ = LINE_SETS[name]
    x, y = cls(off_line_scale=0.0, noise_std=0.0).generate()
    for k in np.unique(y):
        singular = np.linalg.svd(x[y == k] - x[y == k].mean(0), compute_uv=False)
        assert singular[1] < 1e-10 * singular[0]


@pytest.mark.parametrize("name", list(LINE_SETS))
def test_noise_features_have_the_documented_spread(name: str) -> None:
    cls, d, _, _, intrinsic = LINE_SETS[name]
    x, _ = cls(n_samples=3000).generate()
    noise = x[:, intrinsic:]
    assert noise.shape[1] == d - intrinsic
    assert noise.std(0) == pytest.approx(np.full(d - intrinsic, 0.1), rel=0.1)
    assert np.abs(noise.mean(0)).max() < 0.02


def cluster_directions(cls, **kwargs) -> list[np.ndarray]:
    x, y = cls(**kwargs).generate()
    intrinsic = LINE_SETS[cls.name][4]
    return [principal_direction(x[y == k, :intrinsic]) for k in np.unique(y)]


def test_parallel_lines_are_parallel_and_distinct() -> None:
    a, b = cluster_directions(ParallelLinesDataModule)
    assert abs(a @ b) > 0.995
    assert abs(a @ np.array([1.0, 1.0]) / math.sqrt(2)) > 0.995
    x, y = ParallelLinesDataModule(off_line_scale=0.0, noise_std=0.0).generate()
    # The distance between the two lines: the centre offset, across the common direction.
    offset = x[y == 1, :2].mean(0) - x[y == 0, :2].mean(0)
    assert np.linalg.norm(offset - (offset @ a) * a) > 3.0


def test_orthogonal_lines_are_orthogonal() -> None:
    a, b = cluster_directions(OrthogonalDataModule, n_samples=2000)
    assert abs(a @ b) < 0.02
    a, b = cluster_directions(OrthogonalDataModule, off_line_scale=0.0, noise_std=0.0)
    assert abs(a @ b) < 1e-10


def test_triangle_lines_point_three_ways() -> None:
    directions = cluster_directions(TriangleDataModule, off_line_scale=0.0, noise_std=0.0)
    for i in range(3):
        for j in range(i + 1, 3):
            assert abs(directions[i] @ directions[j]) < 0.75  # at least 40 degrees apart


def test_lines3d_follow_the_three_axes() -> None:
    axes = [int(np.argmax(np.abs(d))) for d in cluster_directions(Lines3DDataModule)]
    assert sorted(axes) == [0, 1, 2]
    assert all(np.abs(d).max() > 0.99 for d in cluster_directions(Lines3DDataModule))


def test_line_sets_reject_too_few_features() -> None:
    with pytest.raises(ValueError, match="n_features"):
        Lines3DDataModule(n_features=2)


def test_blobs_are_isotropic_around_separate_centres() -> None:
    dm = BlobsDataModule(n_samples=2000, n_features=4, n_clusters=3, cluster_std=0.5)
    data = dm.load()
    x, y = torch.cat([data.train_x, data.test_x]), torch.cat([data.train_y, data.test_y])
    for k in range(3):
        covariance = np.cov(x[y == k].double().numpy(), rowvar=False)
        assert covariance == pytest.approx(0.25 * np.eye(4), abs=0.06)


# -- transformed images (invariant attention) ----------------------------------------------------
def test_transformed_images_draw_within_the_ranges() -> None:
    sample = TransformedImagesDataModule(n_base=4, copies=50, angle_range=30.0,
                                         shift_range=5.0).generate()
    assert sample.images.shape == (200, 1, 64, 64) and sample.base_images.shape == (4, 1, 64, 64)
    assert 0.0 <= sample.images.min() and sample.images.max() <= 1.0
    assert torch.bincount(sample.labels).tolist() == [50] * 4
    assert sample.angles_deg.abs().max() <= 30.0 and sample.angles_deg.abs().max() > 25.0
    assert sample.shifts.abs().max() <= 5.0 and sample.shifts.abs().max() > 4.5
    # The base images are distinct glyphs, and the copies are moved, not the base as it is.
    assert len(rows(sample.base_images)) == 4
    assert all(not torch.equal(sample.images[i], sample.base_images[sample.labels[i]])
               for i in range(200))


def test_inverse_transform_recovers_the_base_image() -> None:
    from scipy.ndimage import affine_transform

    dm = TransformedImagesDataModule()
    sample = dm.generate()
    size, centre = dm.image_size, (dm.image_size - 1) / 2
    bases = sample.base_images[:, 0].double().numpy()
    grid = np.stack(np.meshgrid(np.arange(size), np.arange(size), indexing="ij"), -1)
    for i in range(0, len(sample.labels), 5):
        theta = math.radians(float(sample.angles_deg[i]))
        shift = sample.shifts[i].double().numpy()
        rotation = np.array([[math.cos(theta), math.sin(theta)],
                             [-math.sin(theta), math.cos(theta)]])
        # The data are base[A (p - c) + c + b]; undo it: recovered[p] = image[A^T (p - c - b) + c].
        source = (grid - centre - shift) @ rotation + centre  # row vectors: A^T v = v A
        recovered = affine_transform(sample.images[i, 0].double().numpy(), rotation.T,
                                     offset=centre - rotation.T @ (centre + shift), order=1)
        inside = ((source >= 1) & (source <= size - 2)).all(-1)  # away from the borders
        own = int(sample.labels[i])
        error = [np.abs(recovered - base)[inside].mean() for base in bases]
        assert error[own] < 0.02
        assert min(e for k, e in enumerate(error) if k != own) > 5 * error[own]
        assert bases[own][~inside].sum() == 0  # the comparison saw the whole glyph
        # Nothing was lost over the edge: the copy carries the glyph's whole ink.
        assert float(sample.images[i].sum()) == pytest.approx(bases[own].sum(), rel=0.02)


def test_transformed_images_reject_bad_options() -> None:
    with pytest.raises(ValueError, match="n_base"):
        TransformedImagesDataModule(n_base=11)
    with pytest.raises(ValueError, match="copies"):
        TransformedImagesDataModule(copies=1)
