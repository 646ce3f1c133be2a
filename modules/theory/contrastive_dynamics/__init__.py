"""Contrastive-learning training dynamics of Calder & Lee, "Understanding Contrastive Learning
through Variational Analysis and Neural Network Optimization Perspectives" (arXiv:2503.10812):
the generalised NT-Xent cost (eq. 4) and its population value, the embedding maps of eq. 18-19
and a deeper MLP, the invariant initialisation of eq. 17, the two dynamics (network, eq. 15;
free particles, eq. 14), and the neural kernel (eq. 12, Propositions 4.3-4.4); and, for the
spectral-clustering view of Tan et al. (arXiv:2303.15103, appendix C), InfoNCE on free
embeddings of a random similarity graph beside its spectral embedding.

These are pieces of an experiment suite (``benchmarks/contrastive_dynamics.yaml``), not methods:
nothing here is registered in :data:`modules.METHODS`.
"""

from modules.blocks.heads import activation_derivative
from modules.theory.contrastive_dynamics.cost import (
    augmented_nt_xent_cost,
    evenly_spaced_circle,
    nt_xent_cost,
    nt_xent_cost_over_views,
    orthogonal_noise_augmentation,
    population_nt_xent,
    uniform_sphere_uniformity,
    uniformity,
)
from modules.theory.contrastive_dynamics.dynamics import (
    Trajectory,
    free_particle_descent,
    network_descent,
    network_velocity,
    sphere_velocity,
)
from modules.theory.contrastive_dynamics.embeddings import (
    OneHiddenLayerEmbedding,
    averaging_matrix,
    first_layer_weight,
    invariant_initialisation_,
    mlp_embedding,
)
from modules.theory.contrastive_dynamics.kernels import (
    closed_form_kernel,
    empirical_neural_kernel,
    infinite_width_kernel,
    parameter_jacobian,
)
from modules.theory.contrastive_dynamics.spectral import (
    gaussian_infonce_loss,
    infonce_graph_embedding,
    out_edge_sampler,
    spectral_embedding,
    stochastic_block_graph,
)

__all__ = [
    "OneHiddenLayerEmbedding",
    "Trajectory",
    "activation_derivative",
    "augmented_nt_xent_cost",
    "averaging_matrix",
    "closed_form_kernel",
    "empirical_neural_kernel",
    "evenly_spaced_circle",
    "first_layer_weight",
    "free_particle_descent",
    "gaussian_infonce_loss",
    "infonce_graph_embedding",
    "infinite_width_kernel",
    "invariant_initialisation_",
    "mlp_embedding",
    "network_descent",
    "network_velocity",
    "nt_xent_cost",
    "nt_xent_cost_over_views",
    "orthogonal_noise_augmentation",
    "out_edge_sampler",
    "parameter_jacobian",
    "population_nt_xent",
    "spectral_embedding",
    "sphere_velocity",
    "stochastic_block_graph",
    "uniform_sphere_uniformity",
    "uniformity",
]
