"""Models and the maths under them, in four layers (each imports only the ones below it):

- :mod:`modules.methods`: the methods (LightningModules) and their registry ``METHODS``;
- :mod:`modules.theory`: the papers' theory (SimCLR's variational dynamics, TransFusion's
  Theorem 2, SE(2)-invariant attention) and the small models their experiments study;
- :mod:`modules.blocks`: backbones, the one MLP builder, optimisers, distributed gathers;
- :mod:`modules.losses`: every loss, a pure function of tensors.

Argument checks shared by all of them are in :mod:`modules.ranges`.
"""
