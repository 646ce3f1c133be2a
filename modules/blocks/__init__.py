"""Building blocks of the methods: backbones, the one MLP builder (:func:`heads.mlp`), optimisers
(LARS and the warm-up cosine schedule), the autograd-aware gathers across devices, and the
target network of a method that learns from a moving average of itself
(:class:`target_network.MomentumTarget`)."""
