"""The papers' theory, below the methods: SimCLR's variational dynamics (free particles against
a network), TransFusion's Theorem 2 and SE(2)-invariant attention."""
