"""Building blocks of the methods: backbones, the one MLP builder (:func:`heads.mlp`), optimisers
(LARS and the warm-up cosine schedule), and the autograd-aware gathers across devices."""
